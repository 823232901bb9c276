#include "kernels/kernel_manager.hpp"

#include "fake_launcher.hpp"
#include "manager_fixture.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

using namespace cellgate;
using namespace std::chrono_literals;
using kernels::kernel_state;
using strings = std::vector<std::string>;
namespace asio = boost::asio;

namespace cellgate::kernels {
// So that a failed expectation names the state.
void PrintTo(kernel_state s, std::ostream* os) { *os << to_string(s); }
}  // namespace cellgate::kernels

namespace {

using namespace cellgate::fixtures;

// The manager's own tests, on the shared fixture.
using kernel_manager_test = manager_fixture;

}  // namespace

TEST_F(kernel_manager_test, starts_a_kernel_that_only_its_tenant_sees) {
    make_manager(fast_config());
    const auto s = start("alice", {{"KERNEL_USERNAME", "alice"}});
    ASSERT_FALSE(s.error) << s.error->message;
    ASSERT_NE(s.k, nullptr);
    const auto id = s.k->id();
    // Ready means the fake kernel answered kernel_info and its iopub was heard.
    EXPECT_TRUE(s.k->ready());
    // Its idle status comes on iopub, which may trail the kernel_info reply on shell.
    EXPECT_TRUE(eventually([&] { return s.k->state() == kernel_state::idle; })) << to_string(s.k->state());
    EXPECT_EQ(s.k->kernel_info().value("implementation", ""), "fake_kernel");

    EXPECT_EQ(manager->find("alice", id).get(), s.k.get());
    EXPECT_EQ(manager->find("bob", id), nullptr);
    const auto listed = manager->list("alice");
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].get(), s.k.get());
    EXPECT_TRUE(manager->list("bob").empty());
    EXPECT_EQ(manager->count(), 1u);

    EXPECT_EQ(launcher.calls(id), strings{"launch"});
    const auto launched = launcher.launched();
    ASSERT_EQ(launched.size(), 1u);
    EXPECT_EQ(launched[0].id, id);
    EXPECT_EQ(launched[0].image, "fake-image");
    EXPECT_EQ(launched[0].runtime, "runsc");
    EXPECT_EQ(launched[0].limits.memory_bytes, 123u << 20);
    EXPECT_EQ(launched[0].env, (std::map<std::string, std::string>{{"KERNEL_USERNAME", "alice"}}));
    EXPECT_EQ(run(s.k, "1 + 1").value("status", ""), "ok");
}

TEST_F(kernel_manager_test, a_tenant_over_its_share_is_refused_before_any_launch) {
    auto c = fast_config();
    c.max_kernels_per_tenant = 2;
    make_manager(c);
    ASSERT_FALSE(start("alice").error);
    ASSERT_FALSE(start("alice").error);
    const auto third = start("alice");
    ASSERT_TRUE(third.error);
    EXPECT_EQ(third.error->kind, kernels::failure_kind::over_quota);
    EXPECT_EQ(third.k, nullptr);
    EXPECT_EQ(launcher.count("launch"), 2);

    const auto other = start("bob");
    ASSERT_FALSE(other.error) << other.error->message;
    EXPECT_EQ(launcher.count("launch"), 3);
    EXPECT_EQ(manager->list("alice").size(), 2u);
    EXPECT_EQ(manager->count(), 3u);
}

TEST_F(kernel_manager_test, the_total_limit_holds_across_tenants_until_a_kernel_goes) {
    auto c = fast_config();
    c.max_kernels = 2;
    c.max_kernels_per_tenant = 0;
    make_manager(c);
    const auto a = start("alice");
    ASSERT_FALSE(a.error);
    ASSERT_FALSE(start("bob").error);
    const auto refused = start("carol");
    ASSERT_TRUE(refused.error);
    EXPECT_EQ(refused.error->kind, kernels::failure_kind::over_quota);
    EXPECT_EQ(launcher.count("launch"), 2);

    ASSERT_FALSE(wait_for([&](auto done) { manager->shutdown(a.k, done); }));
    const auto now = start("carol");  // the slot alice's kernel held is free again
    ASSERT_FALSE(now.error) << now.error->message;
    EXPECT_EQ(launcher.count("launch"), 3);
    EXPECT_EQ(manager->count(), 2u);
}

TEST_F(kernel_manager_test, a_failed_launch_gives_back_its_slot) {
    auto c = fast_config();
    c.max_kernels = 1;  // the next start fits only if the failure released the slot
    make_manager(c);

    launcher.fail_launches(1);
    const auto failed = start("alice");
    ASSERT_TRUE(failed.error);
    EXPECT_EQ(failed.error->kind, kernels::failure_kind::start_failed);
    EXPECT_EQ(failed.k, nullptr);
    EXPECT_EQ(manager->count(), 0u);
    EXPECT_TRUE(manager->list("alice").empty());

    launcher.fail_launches(1, true);  // the launcher refused the spec: the caller's fault
    const auto refused = start("alice");
    ASSERT_TRUE(refused.error);
    EXPECT_EQ(refused.error->kind, kernels::failure_kind::invalid);
    EXPECT_EQ(manager->count(), 0u);

    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    EXPECT_EQ(manager->count(), 1u);
    EXPECT_EQ(launcher.count("launch"), 3);
}

TEST_F(kernel_manager_test, a_kernel_that_dies_is_restarted_in_its_kept_workspace) {
    make_manager(fast_config());
    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    const auto k = s.k;
    const auto id = k->id();
    const auto first_pid = launcher.pid_of(id);
    auto clients = std::make_shared<status_recorder>();
    k->add_observer(clients);

    launcher.kill_kernel(id);
    ASSERT_TRUE(eventually([&] { return launcher.count("launch") == 2 && k->ready(); }))
        << to_string(k->state());
    EXPECT_EQ(launcher.calls(id), (strings{"launch", "remove keep_workspace", "launch"}));
    EXPECT_NE(launcher.pid_of(id), first_pid);
    EXPECT_EQ(manager->find("alice", id).get(), k.get());  // the same kernel, under the same id
    EXPECT_EQ(manager->count(), 1u);
    // Ready comes with the kernel_info reply; its idle status may follow a moment later.
    EXPECT_TRUE(eventually([&] { return k->state() == kernel_state::idle; })) << to_string(k->state());
    EXPECT_EQ(metrics.kernel_deaths.load(), 1u);
    EXPECT_EQ(metrics.kernel_restarts.load(), 1u);
    // Clients heard it die, then restart (JupyterLab reconnects on "restarting").
    const auto states = clients->states();
    const auto dead = std::find(states.begin(), states.end(), "dead");
    ASSERT_NE(dead, states.end());
    EXPECT_NE(std::find(dead, states.end(), "restarting"), states.end());
    EXPECT_EQ(clients->first("dead")->value("cellgate_reason", ""), "its process exited");
    // Usable: the new sandbox has a new key, and a cell runs on it.
    EXPECT_EQ(run(k, "1 + 1").value("status", ""), "ok");
}

TEST_F(kernel_manager_test, a_kernel_that_stops_answering_heartbeats_is_restarted) {
    auto c = fast_config();
    c.heartbeat_interval = 50ms;
    c.heartbeat_timeout = 300ms;
    make_manager(c);
    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    const auto k = s.k;
    const auto id = k->id();
    auto clients = std::make_shared<status_recorder>();
    k->add_observer(clients);
    // The housekeeping tick pings and the echoes are seen, over several
    // timeouts, and a kernel that answers is left alone.
    const auto connected = k->last_heartbeat();
    ASSERT_TRUE(eventually([&] { return k->last_heartbeat() - connected > 3 * c.heartbeat_timeout; }));
    EXPECT_EQ(launcher.count("launch"), 1);

    launcher.stop_heartbeat(id);
    ASSERT_TRUE(eventually([&] { return launcher.count("launch") == 2 && k->ready(); }, 5s));
    EXPECT_EQ(launcher.calls(id), (strings{"launch", "remove keep_workspace", "launch"}));
    ASSERT_TRUE(clients->first("dead"));
    EXPECT_EQ(clients->first("dead")->value("cellgate_reason", ""), "no heartbeat for 300 ms");
    // Ready comes with the kernel_info reply; its idle status may follow a moment later.
    EXPECT_TRUE(eventually([&] { return k->state() == kernel_state::idle; })) << to_string(k->state());
}

TEST_F(kernel_manager_test, an_oom_kill_is_what_clients_hear) {
    make_manager(fast_config());
    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    auto clients = std::make_shared<status_recorder>();
    s.k->add_observer(clients);

    launcher.report_oom(true);
    launcher.kill_kernel(s.k->id());
    ASSERT_TRUE(eventually([&] { return clients->first("dead").has_value(); }));
    const auto reason = clients->first("dead")->value("cellgate_reason", "");
    EXPECT_NE(reason.find("OOM-killed"), std::string::npos) << reason;
    EXPECT_NE(reason.find("123 MiB"), std::string::npos) << reason;  // the kernelspec's limit
}

TEST_F(kernel_manager_test, a_spent_restart_budget_leaves_the_kernel_dead) {
    auto c = fast_config();
    c.restart_limit = 1;
    make_manager(c);
    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    const auto k = s.k;
    const auto id = k->id();

    launcher.kill_kernel(id);
    // Until the restart is done a death is not looked at (the restart owns the
    // kernel), so the second one must come after it.
    ASSERT_TRUE(eventually([&] { return starts_done(2) && k->ready(); }));
    launcher.kill_kernel(id);
    ASSERT_TRUE(eventually([&] { return metrics.kernel_deaths == 2; }));
    settle_io();  // the death's handler has decided

    EXPECT_EQ(k->state(), kernel_state::dead);
    EXPECT_EQ(launcher.calls(id), (strings{"launch", "remove keep_workspace", "launch"}));
    EXPECT_EQ(metrics.kernel_restarts.load(), 1u);
    EXPECT_EQ(manager->find("alice", id).get(), k.get());  // still there, dead, for its client to see
    EXPECT_FALSE(manager->revive(k));  // a client's revive spends the same budget
    EXPECT_EQ(launcher.count("launch"), 2);
}

TEST_F(kernel_manager_test, a_shutdown_removes_the_sandbox_and_tells_the_listeners) {
    make_manager(fast_config());
    auto removed = std::make_shared<std::pair<std::mutex, strings>>();
    manager->on_removed([removed](const std::string& id) {
        std::lock_guard lock(removed->first);
        removed->second.push_back(id);
    });
    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    const auto id = s.k->id();

    ASSERT_FALSE(wait_for([&](auto done) { manager->shutdown(s.k, done); }));
    EXPECT_EQ(launcher.calls(id), (strings{"launch", "remove"}));  // the workspace goes too
    EXPECT_EQ(launcher.sandboxes(), 0u);
    {
        std::lock_guard lock(removed->first);
        EXPECT_EQ(removed->second, strings{id});
    }
    EXPECT_EQ(manager->count(), 0u);
    EXPECT_EQ(manager->find("alice", id), nullptr);
    EXPECT_EQ(s.k->state(), kernel_state::terminating);

    const auto again = wait_for([&](auto done) { manager->shutdown(s.k, done); });
    ASSERT_TRUE(again);
    EXPECT_EQ(again->kind, kernels::failure_kind::no_such_kernel);
}

TEST_F(kernel_manager_test, an_interrupt_signals_the_sandbox) {
    make_manager(fast_config());
    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    const auto id = s.k->id();

    EXPECT_FALSE(wait_for([&](auto done) { manager->interrupt(s.k, done); }));
    EXPECT_EQ(launcher.calls(id), (strings{"launch", "signal " + std::to_string(SIGINT)}));

    ASSERT_FALSE(wait_for([&](auto done) { manager->shutdown(s.k, done); }));
    const auto gone = wait_for([&](auto done) { manager->interrupt(s.k, done); });
    ASSERT_TRUE(gone);
    EXPECT_EQ(gone->kind, kernels::failure_kind::not_running);
}

// A restarted sandbox that dies before its kernel answers. Its death comes
// while the restart still owns the kernel (busy_lifecycle); it used to be
// dropped, leaving the kernel "idle", not ready, its process gone and never
// restarted. Now it is kept and handled once the restart is done.
TEST_F(kernel_manager_test, a_restarted_kernel_that_dies_before_it_is_ready_is_restarted_again) {
    auto c = fast_config();
    c.ready_timeout = 1s;
    make_manager(c);
    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    const auto k = s.k;
    const auto id = k->id();

    launcher.mute_next_launch();
    launcher.kill_kernel(id);
    ASSERT_TRUE(eventually([&] { return launcher.count("launch") == 2; }));
    launcher.kill_kernel(id);
    EXPECT_TRUE(eventually([&] { return launcher.count("launch") == 3 && k->ready(); }, 4s))
        << "state " << to_string(k->state()) << ", ready " << k->ready() << ", launches " << launcher.count("launch");
}

// A start whose launch was still running when the gateway began to shut
// down: shutdown_all had taken its list already, so the new sandbox would
// have outlived the gateway. It is removed, and the caller hears why.
TEST_F(kernel_manager_test, a_launch_that_ends_during_shutdown_leaves_no_sandbox) {
    make_manager(fast_config());
    launcher.hold_launches();
    auto p = std::make_shared<std::promise<started>>();
    auto f = p->get_future();
    manager->start_kernel("alice", "fake", {}, [p](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
        p->set_value({std::move(e), std::move(k)});
    });
    ASSERT_TRUE(eventually([&] { return launcher.held() == 1; }));
    manager->shutdown_all();  // nothing registered yet: returns at once
    launcher.release_launches();
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
    const auto s = f.get();
    ASSERT_TRUE(s.error);
    EXPECT_EQ(s.error->kind, kernels::failure_kind::unavailable);
    EXPECT_EQ(s.k, nullptr);
    EXPECT_TRUE(eventually([&] { return launcher.sandboxes() == 0; })) << launcher.sandboxes() << " left";
    EXPECT_EQ(launcher.count("launch"), 1);
    EXPECT_EQ(manager->count(), 0u);
}

namespace {

// The admission gate (a cluster node's etcd round trips) runs off the io
// threads: a gate that blocks leaves them free, and its answer decides.
TEST_F(kernel_manager_test, the_admission_gate_runs_off_the_io_threads_and_its_refusal_holds_no_place) {
    auto c = fast_config();
    c.max_kernels_per_tenant = 3;
    c.max_kernels = 1;  // a refusal that kept its place would block the start after it
    manager = std::make_unique<kernels::kernel_manager>(ioc, launcher, reactor, specs, metrics, c);
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    std::vector<std::pair<std::string, std::size_t>> asked;
    std::vector<std::thread::id> threads;
    manager->set_admission_gate([&](const std::string& tenant, std::size_t count, std::size_t limit)
                                    -> std::optional<kernels::failure> {
        std::unique_lock lock(m);
        asked.emplace_back(tenant, limit);
        threads.push_back(std::this_thread::get_id());
        EXPECT_EQ(count, 1u);
        cv.wait_for(lock, 5s, [&] { return open; });
        if (tenant == "mallory") return kernels::failure{kernels::failure_kind::over_quota, "across the cluster"};
        return std::nullopt;
    });
    manager->start();

    auto p = std::make_shared<std::promise<started>>();
    auto f = p->get_future();
    asio::post(ioc, [this, p] {
        manager->start_kernel("mallory", "fake", {}, [p](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
            p->set_value({std::move(e), std::move(k)});
        });
    });
    settle_io();  // the io thread is free while the gate waits
    EXPECT_EQ(f.wait_for(100ms), std::future_status::timeout);
    {
        std::lock_guard lock(m);
        open = true;
    }
    cv.notify_all();
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
    const auto refused = f.get();
    ASSERT_TRUE(refused.error);
    EXPECT_EQ(refused.error->kind, kernels::failure_kind::over_quota);
    EXPECT_EQ(launcher.count("launch"), 0);

    const auto s = start("alice");
    ASSERT_FALSE(s.error) << s.error->message;
    EXPECT_EQ(launcher.count("launch"), 1);
    std::lock_guard lock(m);
    ASSERT_EQ(asked.size(), 2u);
    EXPECT_EQ(asked[0], (std::pair<std::string, std::size_t>{"mallory", 3}));
    for (const auto& t : threads) EXPECT_NE(t, io_thread.get_id());
}

}  // namespace
