// The kernel manager's supervision: the housekeeping tick (heartbeats, idle
// and lifetime culling, activity for the store), WebSocket cells' time
// limits, and what happens when a kernel's process ends.
#include "kernels/kernel_manager.hpp"

#include "util/log_safe.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <sys/syscall.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

namespace cellgate::kernels {

namespace asio = boost::asio;

namespace {

// As clients read it in a dead kernel's reason: "30 s" ("300 ms" in tests).
std::string duration_text(std::chrono::milliseconds d) {
    return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + " s" : std::to_string(d.count()) + " ms";
}

}  // namespace

void kernel_manager::check_cells() {
    const auto now = steady::now();
    std::vector<std::pair<kernel_ptr, cell_watch::action>> due;
    {
        std::lock_guard lock(mutex_);
        for (auto& [id, r] : kernels_) {
            if (r.busy_lifecycle || r.k->policy().exec_timeout.count() == 0) continue;
            if (const auto a = r.k->enforce_time_limit(now, config_.cell_interrupt_grace); a != cell_watch::action::none)
                due.emplace_back(r.k, a);
        }
    }
    for (const auto& [k, a] : due) {
        if (a == cell_watch::action::interrupt) {
            ++metrics_.cell_time_limits;
            spdlog::info("kernel {}: a cell ran past its time limit of {} s; interrupting it", k->id(),
                         k->policy().exec_timeout.count());
            interrupt(k, [](std::optional<failure>) {});
        } else {
            spdlog::warn("kernel {}: the cell did not stop within {} s of its interrupt; restarting the kernel",
                         k->id(), config_.cell_interrupt_grace.count());
            do_restart(k, [](std::optional<failure>) {}, true);
        }
    }
    cell_timer_.expires_after(config_.cell_check_interval);
    cell_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) check_cells();
    });
}

void kernel_manager::tick() {
    const auto now = steady::now();
    std::vector<std::pair<kernel_ptr, std::int64_t>> silent;
    std::vector<std::pair<kernel_ptr, std::string>> cull;
    std::vector<kernel_ptr> pause_now;
    {
        std::lock_guard lock(mutex_);
        for (auto& [id, r] : kernels_) {
            const auto state = r.k->state();
            r.k->expire_sessions(now);
            const auto& p = r.k->policy();
            if (p.lifetime.count() > 0 && now - r.k->created_steady() > p.lifetime) {
                if (!p.pause_at_end)
                    cull.emplace_back(r.k, "session expired: its lifetime of " + std::to_string(p.lifetime.count()) + " s is over");
                else if (state != kernel_state::paused && !r.busy_lifecycle)
                    pause_now.push_back(r.k);
                continue;
            }
            // A kernel running a cell someone asked for is working, not idle;
            // reconnects, pings and what the kernel does by itself never count.
            // A paused one is past idling: it waits, costing only disk.
            if (p.idle_timeout.count() > 0 && state != kernel_state::paused && !r.k->serving_request() &&
                !r.busy_lifecycle && now - r.k->last_activity() > p.idle_timeout) {
                if (p.pause_on_idle) pause_now.push_back(r.k);
                else cull.emplace_back(r.k, "session culled: idle for " + std::to_string(p.idle_timeout.count()) + " s");
                continue;
            }
            if (state == kernel_state::restarting || state == kernel_state::terminating ||
                state == kernel_state::dead || r.busy_lifecycle || !r.k->ready())
                continue;
            reactor_.ping(id);
            if (now - r.k->last_heartbeat() > config_.heartbeat_timeout) {
                const auto sb = r.k->sandbox();
                silent.emplace_back(r.k, sb ? sb->pid : 0);
            }
        }
    }
    {
        std::lock_guard lock(mutex_);
        pool_.for_each([&](const kernel_ptr& k) {
            reactor_.ping(k->id());
            if (now - k->last_heartbeat() > config_.heartbeat_timeout) {
                const auto sb = k->sandbox();
                silent.emplace_back(k, sb ? sb->pid : 0);
            }
        });
    }
    if (store_) {
        std::vector<std::pair<std::string, std::chrono::system_clock::time_point>> seen;
        {
            std::lock_guard lock(mutex_);
            for (auto& [id, r] : kernels_) {
                const auto t = r.k->last_activity_time();
                if (t != r.saved_activity) {
                    r.saved_activity = t;
                    seen.emplace_back(id, t);
                }
            }
        }
        store_->touch_kernels(seen);
    }
    for (auto& [k, pid] : silent) on_died(k, pid, "no heartbeat for " + duration_text(config_.heartbeat_timeout));
    for (auto& [k, reason] : cull) {
        spdlog::info("kernel {}: {}", k->id(), reason);
        shutdown(k, [](std::optional<failure>) {}, reason);
    }
    for (auto& k : pause_now) {
        spdlog::info("kernel {}: idle for {} s; pausing it", k->id(), k->policy().idle_timeout.count());
        pause(k, [id = k->id()](std::optional<failure> f) {
            if (f) spdlog::warn("kernel {}: pausing it when idle failed: {}", id, f->message);
        });
    }
    replenish();  // the pool's target falls back once misses stop (warm_pool::trim)
    tick_timer_.expires_after(config_.heartbeat_interval);
    tick_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) tick();
    });
}

void kernel_manager::watch_process(const kernel_ptr& k, std::int64_t pid) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
    if (fd < 0) {
        on_died(k, pid, "its process is already gone");
        return;
    }
    auto sd = std::make_shared<asio::posix::stream_descriptor>(ioc_, fd);
    std::weak_ptr<kernel> weak = k;
    sd->async_wait(asio::posix::stream_descriptor::wait_read, [this, weak, pid, sd](const boost::system::error_code& ec) {
        if (ec) return;
        if (auto alive = weak.lock()) on_died(alive, pid, "its process exited");
    });
}

void kernel_manager::on_died(const kernel_ptr& k, std::int64_t pid, const std::string& why) {
    bool warm = false;
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end()) warm = pool_.holds(k);
    }
    if (warm) return drop_from_pool(k, "died while waiting in the pool (" + why + ")");
    // The cause is read from the sandbox first, before anything (a restart)
    // removes it, and before clients are told: they hear why.
    asio::post(launch_pool_, [this, k, pid, why] {
        bool oom = false;
        try {
            oom = launcher_.status(k->id()).oom_killed;
        } catch (const std::exception& e) {
            spdlog::debug("kernel {}: no status after its death: {}", k->id(), e.what());
        }
        asio::post(ioc_, [this, k, pid, why, oom] { confirm_death(k, pid, why, oom); });
    });
}

void kernel_manager::confirm_death(const kernel_ptr& k, std::int64_t pid, const std::string& why, bool oom) {
    bool restart_now = false;
    std::string reason = why;
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end() || it->second.k != k || shutting_down_) return;
        const auto sb = k->sandbox();
        if (!sb || sb->pid != pid) return;  // an old process of a restarted kernel
        if (it->second.busy_lifecycle) {
            it->second.died_while_busy = record::death{pid, why, oom};
            return;
        }
        const auto state = k->state();
        if (state == kernel_state::dead || state == kernel_state::terminating || state == kernel_state::restarting ||
            state == kernel_state::paused)
            return;
        if (oom) {
            const auto* ks = specs_.find(k->spec_name());
            reason = "OOM-killed: it used more than its memory limit" +
                     (ks != nullptr ? " of " + std::to_string(ks->limits.memory_bytes >> 20) + " MiB" : std::string());
        }
        spdlog::warn("kernel {}: died ({}{})", k->id(), why, oom ? ", OOM-killed by its memory limit" : "");
        ++metrics_.kernel_deaths;
        k->set_state(kernel_state::dead);
        k->broadcast_status("dead", reason);
        restart_now = config_.auto_restart && it->second.budget.take(steady::now());
    }
    if (restart_now) do_restart(k, [](std::optional<failure>) {}, true);
}

}  // namespace cellgate::kernels
