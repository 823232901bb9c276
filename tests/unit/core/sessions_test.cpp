// The core's front door for sessions (core/sessions.hpp), on the real kernel
// manager over the fake launcher and kernels: the one path every door
// (/api, /v1, E2B, MCP) starts a session through, the policy it grants, and
// a live session's lifetime changed under the kernel's lock.
#include "core/files.hpp"
#include "core/sessions.hpp"

#include "../kernels/manager_fixture.hpp"
#include "util/api_error.hpp"

#include <gtest/gtest.h>

using namespace cellgate;
using namespace cellgate::fixtures;
using std::chrono::seconds;

namespace {

class core_sessions_test : public manager_fixture {
protected:
    core_sessions_test() {
        make_manager(fast_config());
        front_ = std::make_unique<core::sessions>(*manager, limits, nullptr);
    }

    started start(const core::session_request& r) {
        auto p = std::make_shared<std::promise<started>>();
        auto f = p->get_future();
        front_->start(r, [p](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
            p->set_value({std::move(e), std::move(k)});
        });
        if (f.wait_for(5s) != std::future_status::ready) return {no_callback(), nullptr};
        return f.get();
    }

    // The status a request the core refuses before starting anything throws.
    unsigned refusal(const core::session_request& r) {
        try {
            front_->start(r, [](std::optional<kernels::failure>, kernels::kernel_ptr) {
                ADD_FAILURE() << "the core started a session it should have refused";
            });
        } catch (const api_exception& e) {
            return e.status();
        }
        return 0;
    }

    const agent::agent_limits limits;
    std::unique_ptr<core::sessions> front_;
};

}  // namespace

TEST(core_policy_for, each_limit_asked_is_held_to_its_ceiling) {
    const agent::agent_limits limits;
    const auto& base = limits.defaults;
    core::session_request r;
    EXPECT_EQ(core::policy_for(r, base, limits).exec_timeout, base.exec_timeout);  // nothing asked: the base
    r.limits.exec_timeout = seconds(99999);
    r.limits.output_limit_bytes = 1;
    auto p = core::policy_for(r, base, limits);
    EXPECT_EQ(p.exec_timeout, limits.maxima.exec_timeout);  // past the server's maximum: the maximum
    EXPECT_EQ(p.output_limit_bytes, 1u);
    // The operator gave this kernelspec or tenant more than the maximum: up to that.
    auto wide = base;
    wide.exec_timeout = limits.maxima.exec_timeout * 2;
    EXPECT_EQ(core::policy_for(r, wide, limits).exec_timeout, limits.maxima.exec_timeout * 2);
    // Asking for none (0) gets the ceiling, never none...
    r.limits.exec_timeout = seconds(0);
    r.limits.lifetime = seconds(0);
    p = core::policy_for(r, base, limits);
    EXPECT_EQ(p.exec_timeout, limits.maxima.exec_timeout);
    EXPECT_EQ(p.lifetime, limits.maxima.lifetime);
    // ...except no idle limit for a session that has a lifetime, which ends it anyway.
    r.limits.idle_timeout = seconds(0);
    EXPECT_EQ(core::policy_for(r, base, limits).idle_timeout, seconds(0));
    auto endless = base;
    endless.lifetime = seconds(0);
    r.limits.lifetime.reset();
    auto unbounded = limits;
    unbounded.maxima.lifetime = seconds(0);
    EXPECT_EQ(core::policy_for(r, endless, unbounded).idle_timeout, limits.maxima.idle_timeout);
    // autoPause: unset keeps the policy's; given, it sets it either way.
    auto pausing = base;
    pausing.pause_at_end = true;
    EXPECT_TRUE(core::policy_for(r, pausing, limits).pause_at_end);
    r.pause_at_end = false;
    EXPECT_FALSE(core::policy_for(r, pausing, limits).pause_at_end);
}

TEST_F(core_sessions_test, each_surface_starts_with_its_defaults_and_what_it_asked) {
    const auto jupyter = start({.tenant = "alice", .surface = kernels::surface::jupyter});
    ASSERT_FALSE(jupyter.error) << jupyter.error->message;
    EXPECT_EQ(jupyter.k->spec_name(), "fake");  // "" is the default kernelspec
    const auto book = manager->config().policies;
    EXPECT_EQ(jupyter.k->policy().exec_timeout, book.jupyter.exec_timeout);
    EXPECT_EQ(jupyter.k->policy().lifetime, book.jupyter.lifetime);

    core::session_request agent{.tenant = "alice", .kernelspec = "fake", .env = {{"KERNEL_X", "1"}}};
    agent.limits.lifetime = seconds(90);
    agent.limits.idle_timeout = seconds(0);  // E2B's: it ends at its lifetime
    agent.pause_at_end = true;
    const auto a = start(agent);
    ASSERT_FALSE(a.error) << a.error->message;
    EXPECT_EQ(a.k->policy().exec_timeout, book.agent.exec_timeout);
    EXPECT_EQ(a.k->policy().lifetime, seconds(90));
    EXPECT_EQ(a.k->policy().idle_timeout, seconds(0));
    EXPECT_TRUE(a.k->policy().pause_at_end);
    EXPECT_EQ(launcher.launched().back().env.at("KERNEL_X"), "1");
}

TEST_F(core_sessions_test, a_request_the_core_refuses_starts_nothing) {
    EXPECT_EQ(refusal({.tenant = "alice", .from_snapshot = "no-such-snapshot"}), 404u);
    EXPECT_EQ(refusal({.tenant = "alice", .kernelspec = "fake", .from_snapshot = "x"}), 400u);
    EXPECT_EQ(refusal({.tenant = "alice", .volumes = {{.name = "nope"}}}), 404u);
    // This gateway runs no egress proxy: no session may have a network.
    EXPECT_EQ(refusal({.tenant = "alice", .network = nlohmann::json{{"allow", {"pypi.org"}}}}), 400u);
    EXPECT_TRUE(launcher.launched().empty());
    EXPECT_EQ(manager->count(), 0u);
}

TEST_F(core_sessions_test, a_live_sessions_end_moves_and_its_files_open_one_way) {
    const auto s = start({.tenant = "bob"});
    ASSERT_FALSE(s.error) << s.error->message;
    core::sessions::end_at(s.k, s.k->created() + seconds(30));
    EXPECT_EQ(s.k->policy().lifetime, seconds(30));
    EXPECT_EQ(s.k->policy().idle_timeout, seconds(0));  // idle or not
    core::sessions::end_at(s.k, s.k->created() - seconds(5));
    EXPECT_EQ(s.k->policy().lifetime, seconds(1));  // the past: at once, never "none"

    std::filesystem::create_directories(s.k->sandbox()->workspace_dir);  // the fake makes none
    const auto files = core::open_files(s.k);
    ASSERT_NE(files, nullptr);
    EXPECT_EQ(core::contents_status(contents::error_kind::no_space), 507u);
}
