// A kernel's interrupts and restarts (kernel_manager.hpp): asked for, or
// automatic after a death within the restart budget; revive() for a dead
// kernel a client wants again; relaunch (the old sandbox goes, its workspace
// stays, a new one starts and the kernel re-binds to it) and what a failed
// restart leaves.
#include "kernels/kernel_manager.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "util/log_safe.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace cellgate::kernels {

namespace asio = boost::asio;

void kernel_manager::interrupt(const kernel_ptr& k, done callback) {
    asio::post(launch_pool_, [this, k, callback = std::move(callback)] {
        try {
            launcher_.signal(k->id(), SIGINT);
            callback(std::nullopt);
        } catch (const std::exception& e) {
            spdlog::warn("kernel {}: interrupt failed: {}", k->id(), e.what());
            callback(failure{failure_kind::not_running, "The kernel is not running"});
        }
    });
}

void kernel_manager::restart(const kernel_ptr& k, done callback) { do_restart(k, std::move(callback), false); }

bool kernel_manager::is_registered(const kernel_ptr& k) const {
    std::lock_guard lock(mutex_);
    const auto it = kernels_.find(k->id());
    return it != kernels_.end() && it->second.k == k;
}

bool kernel_manager::revive(const kernel_ptr& k) {
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end() || it->second.busy_lifecycle || shutting_down_ || k->state() != kernel_state::dead)
            return false;
        auto& budget = it->second.budget;
        const auto now = steady::now();
        if (budget.paused(now)) return false;
        if (!budget.take(now)) {
            spdlog::warn("kernel {}: dead, and its restart budget ({} in {} s) is spent; not restarting it",
                         k->id(), config_.restart_limit, config_.restart_window.count());
            return false;
        }
    }
    spdlog::info("kernel {}: dead; restarting it", k->id());
    do_restart(k, [](std::optional<failure>) {}, true);
    return true;
}

void kernel_manager::do_restart(const kernel_ptr& k, done callback, bool automatic) {
    std::map<std::string, std::string> env;
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end()) {
            callback(failure{failure_kind::no_such_kernel, "No such kernel"});
            return;
        }
        if (it->second.busy_lifecycle) {
            callback(failure{failure_kind::busy, "The kernel is already restarting or shutting down"});
            return;
        }
        it->second.busy_lifecycle = true;
        env = it->second.env;
    }
    if (k->state() == kernel_state::paused) {
        // A restart of a paused kernel is a new kernel on its files: the pause is over.
        auto p = k->pause_info();
        p.mode.clear();
        p.resumed_from = "restart";
        k->set_pause_info(p);
        if (store_) store_->set_paused(k->id(), "", {}, 0);
    }
    ++metrics_.kernel_restarts;
    k->set_state(kernel_state::restarting);
    reactor_.suspend_kernel(k->id());
    // Clients hear "restarting" only for automatic restarts: JupyterLab reads it
    // as "the server restarted the kernel" and reconnects; after a restart it
    // asked for itself it reconnects anyway (jupyter_server does the same).
    if (automatic) k->broadcast_status("restarting");
    const auto spec = spec_for(*k, env);
    launches_.submit(k->tenant(), [this, k, spec, automatic, callback = std::move(callback)] {
        relaunch(k, spec, automatic, callback);
    });
}

// On a launch thread: the old sandbox goes (its workspace stays), a new one
// starts, the kernel re-binds to it.
void kernel_manager::relaunch(const kernel_ptr& k, const launcher::sandbox_spec& spec, bool automatic,
                              const done& callback) {
    const auto t0 = steady::now();
    launcher::sandbox_info info;
    try {
        launcher_.remove(k->id(), {.keep_workspace = true});
        prepare_egress(*k, spec);
        info = launcher_.launch(spec);
    } catch (const std::exception& e) {
        return restart_failed(k, e.what(), callback);
    }
    ++metrics_.sandbox_starts;
    if (!is_registered(k)) {
        // Shut down while this restart ran (its remove may have come
        // before the launch): the new sandbox must not outlive it.
        spdlog::info("kernel {}: shut down during its restart; removing the new sandbox", k->id());
        try {
            launcher_.remove(k->id());
        } catch (const std::exception& e) {
            spdlog::error("kernel {}: removing its sandbox failed: {}", k->id(), e.what());
        }
        callback(failure{failure_kind::no_such_kernel, "The kernel was shut down"});
        return;
    }
    bring_up(k, std::move(info), [this, k, t0, automatic, callback](bool ok) {
        std::optional<record::death> died;
        {
            std::lock_guard lock(mutex_);
            if (auto it = kernels_.find(k->id()); it != kernels_.end()) {
                it->second.busy_lifecycle = false;
                it->second.budget.succeeded();
                died = std::exchange(it->second.died_while_busy, std::nullopt);
            }
        }
        if (!ok) k->set_state(kernel_state::idle);
        metrics_.sandbox_start_seconds.observe(std::chrono::duration<double>(steady::now() - t0).count());
        spdlog::info("kernel {}: {} restart done ({} ms)", k->id(), automatic ? "automatic" : "requested",
                     std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count());
        callback(std::nullopt);
        // A death of the new sandbox while it was starting is handled now,
        // like any other (confirm_death ignores one of the sandbox it replaced).
        if (died) confirm_death(k, died->pid, died->why, died->oom);
    });
}

void kernel_manager::restart_failed(const kernel_ptr& k, const std::string& what, const done& callback) {
    ++metrics_.sandbox_start_failures;
    if (!is_registered(k)) {
        spdlog::info("kernel {}: shut down during its restart ({})", k->id(), util::log_safe(what));
        callback(failure{failure_kind::no_such_kernel, "The kernel was shut down"});
        return;
    }
    int failures = 0;
    std::chrono::seconds pause{1};
    {
        std::lock_guard lock(mutex_);
        if (auto it = kernels_.find(k->id()); it != kernels_.end()) {
            it->second.busy_lifecycle = false;
            it->second.died_while_busy.reset();  // it is dead already
            pause = it->second.budget.failed(steady::now());
            failures = it->second.budget.failures();
        }
    }
    k->set_state(kernel_state::dead);
    k->broadcast_status("dead");
    // Tried again with a growing pause (1, 2, 4 … 30 s) until the restart
    // budget is spent; a client's request can also revive it, no sooner.
    spdlog::error("kernel {}: restart failed (attempt {}): {}; trying again in {} s", k->id(), failures,
                  util::log_safe(what), pause.count());
    auto retry = std::make_shared<asio::steady_timer>(ioc_, pause);
    std::weak_ptr<kernel> weak = k;
    retry->async_wait([this, weak, retry](const boost::system::error_code& ec) {
        if (auto alive = weak.lock(); alive && !ec) revive(alive);
    });
    // The launcher's error names host paths and quotes the kernel's log
    // (tenant-written text): the log gets it, the client a summary (L5).
    callback(failure{failure_kind::start_failed, "The kernel could not be restarted; its files are kept. It is retried "
                            "automatically; see the gateway log for kernel " + k->id()});
}

}  // namespace cellgate::kernels
