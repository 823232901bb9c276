// The core's front door for cells (core/executions.hpp), on the real kernel
// manager and agent service over the fake launcher and kernels: the
// preconditions every door's cell meets (a paused session that resumes only
// when asked, a dead kernel) and a cell run through the core, whose result
// names no surface's URL and whose ledger record names its door.
#include "core/executions.hpp"

#include "../kernels/manager_fixture.hpp"

#include <gtest/gtest.h>

using namespace cellgate;
using namespace cellgate::fixtures;

namespace {

class core_executions_test : public manager_fixture {
protected:
    core_executions_test() {
        make_manager(fast_config());
        agents = std::make_unique<agent::agent_service>(ioc, *manager, limits);
        cells = std::make_unique<core::executions>(*manager, *agents);
    }
    ~core_executions_test() override {
        cells.reset();
        if (manager) manager->shutdown_all();
    }

    nlohmann::json run(const kernels::kernel_ptr& k, const core::cell_request& r) {
        auto p = std::make_shared<std::promise<nlohmann::json>>();
        auto f = p->get_future();
        cells->run(k, cells->options(*k, r), {}, [p](nlohmann::json result) { p->set_value(std::move(result)); });
        return f.wait_for(5s) == std::future_status::ready ? f.get() : nlohmann::json();
    }

    const agent::agent_limits limits;
    std::unique_ptr<agent::agent_service> agents;
    std::unique_ptr<core::executions> cells;
};

// Every URL-looking string anywhere in a JSON value.
void collect_urls(const nlohmann::json& v, std::vector<std::string>& out) {
    if (v.is_string() && v.get<std::string>().find("/v1/") != std::string::npos) out.push_back(v.get<std::string>());
    if (v.is_structured())
        for (const auto& [key, item] : v.items()) {
            if (key.ends_with("url")) out.push_back(key);
            collect_urls(item, out);
        }
}

}  // namespace

TEST_F(core_executions_test, a_live_session_is_ready) {
    const auto s = start("t");
    ASSERT_FALSE(s.error) << s.error->message;
    EXPECT_FALSE(cells->ready(s.k));
}

TEST_F(core_executions_test, a_paused_session_that_resumes_only_when_asked_refuses_the_cell) {
    const auto s = start("t");
    ASSERT_FALSE(s.error) << s.error->message;
    s.k->change_policy([](kernels::kernel_policy& p) { p.auto_resume = false; });
    s.k->set_state(kernels::kernel_state::paused);
    const auto no = cells->ready(s.k);
    ASSERT_TRUE(no);
    EXPECT_EQ(no->why.kind, kernels::failure_kind::busy);
    EXPECT_NE(no->why.message.find("paused"), std::string::npos) << no->why.message;
    EXPECT_FALSE(no->retry_after);  // it waits to be asked, not for time
    EXPECT_EQ(s.k->state(), kernels::kernel_state::paused);  // nothing was resumed
}

TEST_F(core_executions_test, a_dead_kernel_refuses_the_cell_and_is_revived_when_it_may_be) {
    const auto s = start("t");
    ASSERT_FALSE(s.error) << s.error->message;
    launcher.fail_launches(100);  // every restart fails: the kernel stays dead
    launcher.kill_kernel(s.k->id());
    ASSERT_TRUE(eventually([&] { return s.k->state() == kernels::kernel_state::dead; }, 10s));
    const auto no = cells->ready(s.k);
    ASSERT_TRUE(no);
    EXPECT_EQ(no->why.kind, kernels::failure_kind::unavailable);
    EXPECT_NE(no->why.message.find("dead"), std::string::npos) << no->why.message;
    EXPECT_NE(no->why.message.find("files are kept"), std::string::npos) << no->why.message;
    EXPECT_EQ(no->retry_after, std::chrono::seconds(2));  // every door says when to ask again
}

TEST_F(core_executions_test, a_cell_run_through_the_core_names_no_url_and_its_record_names_its_door) {
    const auto s = start("t");
    ASSERT_FALSE(s.error) << s.error->message;
    core::cell_request r;
    r.code = "1 + 1";
    r.report_files = false;
    r.max_output_tokens = 100;
    r.surface = "mcp";
    const auto result = run(s.k, r);
    ASSERT_TRUE(result.is_object()) << "no result within 5 s";
    EXPECT_EQ(result["status"], "ok") << result.dump();
    std::vector<std::string> urls;
    collect_urls(result, urls);
    EXPECT_TRUE(urls.empty()) << result.dump();
    EXPECT_EQ(result["budget"]["max_output_bytes"], 400);
    EXPECT_EQ(result["budget"]["output_kept"], false);  // no spool here: nothing to read back
    ASSERT_TRUE(eventually([&] { return !agents->ledger().list(s.k->id(), 0, 10).records.empty(); }, 5s));
    const auto records = agents->ledger().list(s.k->id(), 0, 10).records;
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0]["surface"], "mcp");
    EXPECT_EQ(records[0]["execution_id"], result["execution_id"]);
}
