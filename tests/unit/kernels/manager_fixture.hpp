#pragma once

// The real kernel manager, reactor, io_context and metrics over the fake
// launcher and fake kernels, for the tests of the manager and of the core's
// verbs above it (tests/unit/core).

#include "kernels/kernel_manager.hpp"

#include "fake_launcher.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cellgate::fixtures {

using namespace std::chrono_literals;
using strings = std::vector<std::string>;
namespace asio = boost::asio;

// What the manager does happens on its threads: a test polls for the outcome
// until a deadline instead of sleeping for it, so it neither waits longer
// than it must nor hangs.
inline bool eventually(const std::function<bool()>& holds, std::chrono::milliseconds within = 3s) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (!holds()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

// Keeps the iopub statuses a kernel fans out to its clients.
class status_recorder : public kernels::kernel_subscriber {
public:
    void deliver(messaging::kernel_message_ptr m) override {
        if (m->fields.msg_type != "status") return;
        std::lock_guard lock(mutex_);
        contents_.push_back(nlohmann::json::parse(m->msg.content));
    }
    void kernel_closed(const std::string&) override {}
    // Their execution_state, in order.
    strings states() const {
        std::lock_guard lock(mutex_);
        strings out;
        for (const auto& c : contents_) out.push_back(c.value("execution_state", ""));
        return out;
    }
    std::optional<nlohmann::json> first(const std::string& execution_state) const {
        std::lock_guard lock(mutex_);
        for (const auto& c : contents_)
            if (c.value("execution_state", "") == execution_state) return c;
        return std::nullopt;
    }

private:
    mutable std::mutex mutex_;
    std::vector<nlohmann::json> contents_;
};

inline kernels::kernelspec fake_spec() {
    kernels::kernelspec k;
    k.name = "fake";
    k.display_name = "Fake";
    k.image = "fake-image";
    k.runtime = "runsc";
    k.limits.memory_bytes = 123u << 20;
    return k;
}

inline std::filesystem::path make_temp_dir() {
    // Short: the kernel's ipc paths live below it, and a unix socket path has 107 bytes at most.
    std::string tmpl = (std::filesystem::temp_directory_path() / "cellgate-km-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    return tmpl;
}

inline launcher::launcher_config rules_in(const std::filesystem::path& dir) {
    launcher::launcher_config c;
    c.image_store = dir / "images";  // empty: the kernelspec stays as the test built it
    return c;
}

// A callback that never came: the test fails here, and the caller gets a
// failure that matches none it expects.
inline kernels::failure no_callback() {
    ADD_FAILURE() << "no callback within 5 s";
    return {kernels::failure_kind::unavailable, "no callback within 5 s"};
}

struct started {
    std::optional<kernels::failure> error;
    kernels::kernel_ptr k;
};

// The real manager, reactor, io_context and metrics; only the launcher and
// the kernels behind it are fakes.
class manager_fixture : public ::testing::Test {
protected:
    manager_fixture() {
        reactor.start();
        io_thread = std::thread([this] { ioc.run(); });
    }

    // The order of main(): kernels stopped first, then the io threads, then
    // the manager (its launch threads) and the reactor.
    ~manager_fixture() override {
        if (manager) manager->shutdown_all();
        work.reset();
        ioc.stop();
        io_thread.join();
        manager.reset();
        reactor.stop();
        std::filesystem::remove_all(dir);
    }

    // Timings a test can wait out: readiness is polled every 5 ms.
    kernels::manager_config fast_config() const {
        kernels::manager_config c;
        c.launcher_rules = rules;
        c.nudge_interval = 5ms;
        c.ready_timeout = 5s;
        c.heartbeat_interval = 1s;  // the heartbeat test sets its own
        c.launch_threads = 2;
        return c;
    }

    void make_manager(kernels::manager_config c) {
        manager = std::make_unique<kernels::kernel_manager>(ioc, launcher, reactor, specs, metrics, std::move(c));
        manager->start();
    }

    started start(const std::string& tenant, const std::map<std::string, std::string>& env = {}) {
        auto p = std::make_shared<std::promise<started>>();
        auto f = p->get_future();
        manager->start_kernel(tenant, "fake", env, [p](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
            p->set_value({std::move(e), std::move(k)});
        });
        if (f.wait_for(5s) != std::future_status::ready) return {no_callback(), nullptr};
        return f.get();
    }

    // Calls a manager operation and waits for its callback.
    static std::optional<kernels::failure> wait_for(const std::function<void(kernels::kernel_manager::done)>& call) {
        auto p = std::make_shared<std::promise<std::optional<kernels::failure>>>();
        auto f = p->get_future();
        call([p](std::optional<kernels::failure> e) { p->set_value(std::move(e)); });
        if (f.wait_for(5s) != std::future_status::ready) return no_callback();
        return f.get();
    }

    // Runs a cell on the gateway's own channel set; the execute_reply's content.
    static nlohmann::json run(const kernels::kernel_ptr& k, const std::string& code) {
        auto p = std::make_shared<std::promise<nlohmann::json>>();
        auto f = p->get_future();
        k->run_silent(code, [p](const nlohmann::json& reply) { p->set_value(reply); });
        return f.wait_for(3s) == std::future_status::ready ? f.get() : nlohmann::json();
    }

    // Returns once the io thread has run what it had queued (one thread runs
    // handlers in order), e.g. the rest of the handler that was running.
    void settle_io() {
        auto p = std::make_shared<std::promise<void>>();
        auto f = p->get_future();
        asio::post(ioc, [p] { p->set_value(); });
        ASSERT_EQ(f.wait_for(3s), std::future_status::ready);
    }

    // Starts and restarts whose kernel was then ready (or given up on): the
    // manager records each in the start-time histogram once it is done.
    bool starts_done(int n) const {
        return metrics.render().find("cellgate_sandbox_start_seconds_count " + std::to_string(n) + "\n") !=
               std::string::npos;
    }

    const std::filesystem::path dir = make_temp_dir();
    const launcher::launcher_config rules = rules_in(dir);
    fakes::fake_launcher launcher{dir / "sandboxes"};
    wire::zmq_reactor reactor;
    metrics::registry metrics;
    const kernels::kernelspec_registry specs{{fake_spec()}, "fake", rules};
    asio::io_context ioc;
    asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
    std::thread io_thread;
    std::unique_ptr<kernels::kernel_manager> manager;
};

}  // namespace cellgate::fixtures
