#include "kernels/kernel_manager.hpp"

#include "cellgate/launcher/env_rules.hpp"
#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/protocol/message.hpp"
#include "util/log_safe.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>

namespace cellgate::kernels {

namespace asio = boost::asio;

namespace {

// After the n-th failed restart in a row: 1, 2, 4 … 30 s.
std::chrono::seconds restart_pause(int failures) {
    return std::chrono::seconds(std::min(30, 1 << std::min(std::max(failures, 1) - 1, 5)));
}

}  // namespace

kernel_manager::kernel_manager(asio::io_context& ioc, sandbox_backend& launcher, wire::zmq_reactor& reactor,
                               const kernelspec_registry& specs, metrics::registry& metrics, manager_config config)
    : ioc_(ioc), launcher_(launcher), reactor_(reactor), specs_(specs), metrics_(metrics),
      config_(std::move(config)), launch_pool_(config_.launch_threads),
      launches_(config_.max_launches_per_tenant, [this](launch_gate::job j) { asio::post(launch_pool_, std::move(j)); }),
      tick_timer_(ioc), cell_timer_(ioc) {
    metrics_.add_gauge_source([this](std::string& out) { gauges(out); });
}

kernel_manager::~kernel_manager() {
    tick_timer_.cancel();
    cell_timer_.cancel();
    launch_pool_.join();
}

void kernel_manager::start() {
    tick();
    check_cells();
    replenish();
}

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
            interrupt(k, [](std::optional<api_error>) {});
        } else {
            spdlog::warn("kernel {}: the cell did not stop within {} s of its interrupt; restarting the kernel",
                         k->id(), config_.cell_interrupt_grace.count());
            do_restart(k, [](std::optional<api_error>) {}, true);
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
    {
        std::lock_guard lock(mutex_);
        for (auto& [id, r] : kernels_) {
            const auto state = r.k->state();
            r.k->expire_sessions(now);
            const auto& p = r.k->policy();
            if (p.lifetime.count() > 0 && now - r.k->created_steady() > p.lifetime) {
                cull.emplace_back(r.k, "session expired: its lifetime of " + std::to_string(p.lifetime.count()) + " s is over");
                continue;
            }
            // A kernel running a cell someone asked for is working, not idle;
            // reconnects, pings and what the kernel does by itself never count.
            if (p.idle_timeout.count() > 0 && !r.k->serving_request() && !r.busy_lifecycle &&
                now - r.k->last_activity() > p.idle_timeout) {
                cull.emplace_back(r.k, "session culled: idle for " + std::to_string(p.idle_timeout.count()) + " s");
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
        for (const auto& [name, q] : warm_)
            for (const auto& k : q) {
                reactor_.ping(k->id());
                if (now - k->last_heartbeat() > config_.heartbeat_timeout) {
                    const auto sb = k->sandbox();
                    silent.emplace_back(k, sb ? sb->pid : 0);
                }
            }
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
    for (auto& [k, pid] : silent) on_died(k, pid, "no heartbeat for " + std::to_string(config_.heartbeat_timeout.count()) + " s");
    for (auto& [k, reason] : cull) {
        spdlog::info("kernel {}: {}", k->id(), reason);
        shutdown(k, [](std::optional<api_error>) {}, reason);
    }
    tick_timer_.expires_after(config_.heartbeat_interval);
    tick_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) tick();
    });
}

void kernel_manager::persist(const kernel_ptr& k, const std::map<std::string, std::string>& env) {
    if (!store_) return;
    store_->put_kernel({k->id(), k->tenant(), k->spec_name(), env, k->policy(), k->created(), k->last_activity_time()});
}

void kernel_manager::adopt(const persisted_kernel& row, const std::optional<launcher::sandbox_info>& running) {
    auto k = std::make_shared<kernel>(row.id, row.spec_name, row.tenant, reactor_, config_.kernel, metrics_);
    k->set_policy(row.policy);
    k->restore_times(row.created, row.last_activity);
    {
        std::lock_guard lock(mutex_);
        ++admitted_;  // already admitted once; never refused now
        ++admitted_by_tenant_[row.tenant];
        kernels_[row.id] = record{k, row.env, {}, false, row.last_activity};
    }
    if (!running) {
        spdlog::warn("kernel {}: its sandbox ended while the gateway was down; restarting it (files kept)", row.id);
        ++metrics_.kernel_deaths;
        k->set_state(kernel_state::dead);
        do_restart(k, [](std::optional<api_error>) {}, true);
        return;
    }
    const auto pid = running->pid;
    k->nudge_on_control(true);
    k->connect(*running);
    watch_process(k, pid);
    wait_ready(k, [k](bool ok) {
        k->nudge_on_control(false);
        if (ok) spdlog::info("kernel {}: re-attached to its running sandbox", k->id());
        else spdlog::warn("kernel {}: re-attached, but it did not answer kernel_info in time", k->id());
    });
}

launcher::sandbox_spec kernel_manager::spec_for(const kernel& k, const std::map<std::string, std::string>& env) const {
    const auto* ks = specs_.find(k.spec_name());
    launcher::sandbox_spec spec;
    spec.id = k.id();
    if (ks != nullptr) {
        spec.image = ks->image;
        spec.runtime = ks->runtime;
        spec.limits = ks->limits;
        spec.preload = ks->preload;
    }
    spec.env = env;
    return spec;
}

void kernel_manager::on_removed(std::function<void(const std::string&)> listener) {
    std::lock_guard lock(mutex_);
    removal_listeners_.push_back(std::move(listener));
}

void kernel_manager::set_tenant_quota(const std::string& tenant, std::size_t max_kernels) {
    std::lock_guard lock(mutex_);
    tenant_quota_[tenant] = max_kernels;
}

bool kernel_manager::admit_locked(const std::string& tenant, std::string& why) {
    if (admitted_ >= config_.max_kernels) {
        why = "Session limit reached (" + std::to_string(config_.max_kernels) + " in total)";
        return false;
    }
    std::size_t quota = config_.max_kernels_per_tenant;
    if (const auto it = tenant_quota_.find(tenant); it != tenant_quota_.end() && it->second > 0) quota = it->second;
    if (quota > 0 && admitted_by_tenant_[tenant] >= quota) {
        why = "Session limit reached for this token (" + std::to_string(quota) + ")";
        return false;
    }
    ++admitted_;
    ++admitted_by_tenant_[tenant];
    return true;
}

void kernel_manager::release_locked(const std::string& tenant) {
    --admitted_;
    if (auto it = admitted_by_tenant_.find(tenant); it != admitted_by_tenant_.end() && it->second > 0) --it->second;
}

void kernel_manager::start_kernel(const std::string& tenant, const std::string& spec_name,
                                  const std::map<std::string, std::string>& env, done_kernel callback,
                                  std::optional<kernel_policy> policy) {
    if (specs_.find(spec_name) == nullptr) {
        callback(api_error{404, "No such kernel spec: '" + spec_name + "'"}, nullptr);
        return;
    }
    try {
        launcher::validate_env(env, config_.launcher_rules);  // the same rules the launcher applies
    } catch (const launcher::spec_error& e) {
        callback(api_error{400, e.what()}, nullptr);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        if (shutting_down_) {
            callback(api_error{503, "The gateway is shutting down"}, nullptr);
            return;
        }
        // Counted now, so concurrent starts cannot race past the limits.
        std::string why;
        if (!admit_locked(tenant, why)) {
            callback(api_error{429, why}, nullptr);
            return;
        }
    }
    const auto p = policy.value_or(config_.policies.resolve(surface::jupyter, spec_name, tenant));
    kernel_ptr warm;
    {
        std::lock_guard lock(mutex_);
        warm = take_from_pool_locked(spec_name);
        if (!warm && config_.pool_size.count(spec_name) != 0 && config_.pool_size.at(spec_name) > 0) ++pool_misses_;
    }
    if (warm) {
        claim(warm, tenant, env, p, std::move(callback));
        asio::post(ioc_, [this] { replenish(); });
        return;
    }
    auto k = std::make_shared<kernel>(protocol::make_uuid(), spec_name, tenant, reactor_, config_.kernel, metrics_);
    k->set_policy(p);
    const auto spec = spec_for(*k, env);
    launches_.submit(tenant, [this, k, spec, env, callback = std::move(callback)] {
        const auto t0 = steady::now();
        launcher::sandbox_info info;
        try {
            info = launcher_.launch(spec);
        } catch (const launcher::spec_error& e) {
            ++metrics_.sandbox_start_failures;
            { std::lock_guard lock(mutex_); release_locked(k->tenant()); }
            spdlog::warn("kernel {}: refused: {}", k->id(), e.what());
            callback(api_error{400, e.what()}, nullptr);
            return;
        } catch (const std::exception& e) {
            ++metrics_.sandbox_start_failures;
            { std::lock_guard lock(mutex_); release_locked(k->tenant()); }
            spdlog::error("kernel {}: sandbox start failed: {}", k->id(), util::log_safe(e.what()));
            callback(api_error{500, "The kernel's sandbox could not be started"}, nullptr);
            return;
        }
        ++metrics_.sandbox_starts;
        const auto pid = info.pid;
        k->connect(std::move(info));
        {
            std::lock_guard lock(mutex_);
            kernels_[k->id()] = record{k, env, {}, false, k->last_activity_time()};
        }
        persist(k, env);
        watch_process(k, pid);
        wait_ready(k, [this, k, t0, callback](bool ok) {
            metrics_.sandbox_start_seconds.observe(std::chrono::duration<double>(steady::now() - t0).count());
            if (!ok) spdlog::warn("kernel {}: not ready in time after start", k->id());
            spdlog::info("kernel {}: started ({} ms)", k->id(),
                         std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count());
            callback(std::nullopt, k);
        });
    });
}

namespace {

// Nudges a kernel at a fixed interval until it is ready or the deadline passes.
struct ready_waiter : std::enable_shared_from_this<ready_waiter> {
    ready_waiter(asio::io_context& ioc, kernel_ptr kp, steady::time_point d, std::chrono::milliseconds i,
                 std::function<void(bool)> t)
        : timer(ioc), k(std::move(kp)), deadline(d), interval(i), then(std::move(t)) {}
    void step() {
        if (k->nudge()) return then(true);
        if (steady::now() > deadline || k->state() == kernel_state::terminating) return then(false);
        timer.expires_after(interval);
        timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
            if (!ec) self->step();
        });
    }
    asio::steady_timer timer;
    kernel_ptr k;
    steady::time_point deadline;
    std::chrono::milliseconds interval;
    std::function<void(bool)> then;
};

}  // namespace

void kernel_manager::wait_ready(const kernel_ptr& k, std::function<void(bool)> then) {
    auto waiter = std::make_shared<ready_waiter>(ioc_, k, steady::now() + config_.ready_timeout,
                                                 config_.nudge_interval, std::move(then));
    asio::post(ioc_, [waiter] { waiter->step(); });
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
        if (it == kernels_.end()) {
            const auto& q = warm_[k->spec_name()];
            warm = std::find(q.begin(), q.end(), k) != q.end();
        }
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
        if (it == kernels_.end() || it->second.k != k || it->second.busy_lifecycle || shutting_down_) return;
        const auto sb = k->sandbox();
        if (!sb || sb->pid != pid) return;  // an old process of a restarted kernel
        const auto state = k->state();
        if (state == kernel_state::dead || state == kernel_state::terminating || state == kernel_state::restarting)
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
        auto& r = it->second;
        const auto now = steady::now();
        std::erase_if(r.restarts, [&](auto t) { return now - t > config_.restart_window; });
        if (config_.auto_restart && static_cast<int>(r.restarts.size()) < config_.restart_limit) {
            r.restarts.push_back(now);
            restart_now = true;
        }
    }
    if (restart_now) do_restart(k, [](std::optional<api_error>) {}, true);
}

void kernel_manager::interrupt(const kernel_ptr& k, done callback) {
    asio::post(launch_pool_, [this, k, callback = std::move(callback)] {
        try {
            launcher_.signal(k->id(), SIGINT);
            callback(std::nullopt);
        } catch (const std::exception& e) {
            spdlog::warn("kernel {}: interrupt failed: {}", k->id(), e.what());
            callback(api_error{409, "The kernel is not running"});
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
        auto& r = it->second;
        const auto now = steady::now();
        if (now < r.retry_at) return false;
        // The same budget as restarts after a death: revived starts count too.
        std::erase_if(r.restarts, [&](auto t) { return now - t > config_.restart_window; });
        if (static_cast<int>(r.restarts.size()) >= config_.restart_limit) {
            spdlog::warn("kernel {}: dead, and its restart budget ({} in {} s) is spent; not restarting it",
                         k->id(), config_.restart_limit, config_.restart_window.count());
            return false;
        }
        r.restarts.push_back(now);
    }
    spdlog::info("kernel {}: dead; restarting it", k->id());
    do_restart(k, [](std::optional<api_error>) {}, true);
    return true;
}

void kernel_manager::do_restart(const kernel_ptr& k, done callback, bool automatic) {
    std::map<std::string, std::string> env;
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end()) {
            callback(api_error{404, "No such kernel"});
            return;
        }
        if (it->second.busy_lifecycle) {
            callback(api_error{409, "The kernel is already restarting or shutting down"});
            return;
        }
        it->second.busy_lifecycle = true;
        env = it->second.env;
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
        const auto t0 = steady::now();
        launcher::sandbox_info info;
        try {
            launcher_.remove(k->id(), {.keep_workspace = true});
            info = launcher_.launch(spec);
        } catch (const std::exception& e) {
            ++metrics_.sandbox_start_failures;
            if (!is_registered(k)) {
                spdlog::info("kernel {}: shut down during its restart ({})", k->id(), e.what());
                callback(api_error{404, "The kernel was shut down"});
                return;
            }
            int failures = 0;
            {
                std::lock_guard lock(mutex_);
                if (auto it = kernels_.find(k->id()); it != kernels_.end()) {
                    it->second.busy_lifecycle = false;
                    failures = ++it->second.failed_restarts;
                    it->second.retry_at = steady::now() + restart_pause(failures);
                }
            }
            k->set_state(kernel_state::dead);
            k->broadcast_status("dead");
            // Tried again with a growing pause (1, 2, 4 … 30 s) until the restart
            // budget is spent; a client's request can also revive it, no sooner.
            const auto pause = restart_pause(failures);
            spdlog::error("kernel {}: restart failed (attempt {}): {}; trying again in {} s", k->id(), failures,
                          util::log_safe(e.what()), pause.count());
            auto retry = std::make_shared<asio::steady_timer>(ioc_, pause);
            std::weak_ptr<kernel> weak = k;
            retry->async_wait([this, weak, retry](const boost::system::error_code& ec) {
                if (auto alive = weak.lock(); alive && !ec) revive(alive);
            });
            // The launcher's error names host paths and quotes the kernel's log
            // (tenant-written text): the log gets it, the client a summary (L5).
            callback(api_error{500, "The kernel could not be restarted; its files are kept. It is retried "
                                    "automatically; see the gateway log for kernel " + k->id()});
            return;
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
            callback(api_error{404, "The kernel was shut down"});
            return;
        }
        const auto pid = info.pid;
        k->connect(std::move(info));
        watch_process(k, pid);
        wait_ready(k, [this, k, t0, automatic, callback](bool ok) {
            {
                std::lock_guard lock(mutex_);
                if (auto it = kernels_.find(k->id()); it != kernels_.end()) {
                    it->second.busy_lifecycle = false;
                    it->second.failed_restarts = 0;
                }
            }
            if (!ok) k->set_state(kernel_state::idle);
            metrics_.sandbox_start_seconds.observe(std::chrono::duration<double>(steady::now() - t0).count());
            spdlog::info("kernel {}: {} restart done ({} ms)", k->id(), automatic ? "automatic" : "requested",
                         std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count());
            callback(std::nullopt);
        });
    });
}

void kernel_manager::shutdown(const kernel_ptr& k, done callback, const std::string& reason) {
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end()) {
            callback(api_error{404, "No such kernel"});
            return;
        }
        kernels_.erase(it);
    }
    // Forgotten first: a crash from here on leaves a sandbox nobody claims,
    // which the next start removes.
    if (store_) store_->remove_kernel(k->id());
    k->set_state(kernel_state::terminating);
    k->close(reason);
    asio::post(launch_pool_, [this, k, reason, callback = std::move(callback)] {
        try {
            launcher_.remove(k->id());
        } catch (const std::exception& e) {
            spdlog::error("kernel {}: removing its sandbox failed: {}", k->id(), e.what());
        }
        std::vector<std::function<void(const std::string&)>> listeners;
        {
            std::lock_guard lock(mutex_);
            release_locked(k->tenant());
            listeners = removal_listeners_;
        }
        metrics_.forget_kernel(k->id());
        for (const auto& l : listeners) l(k->id());
        spdlog::info("kernel {}: shut down ({})", k->id(), reason);
        callback(std::nullopt);
    });
}

void kernel_manager::shutdown_all() {
    std::vector<kernel_ptr> all;
    std::vector<kernel_ptr> warm;
    {
        std::lock_guard lock(mutex_);
        shutting_down_ = true;
        for (auto& [id, r] : kernels_) all.push_back(r.k);
        for (auto& [name, q] : warm_)
            for (auto& k : q) warm.push_back(k);
        warm_.clear();
    }
    // Warm kernels belong to nobody: they are registered for a moment so the
    // shutdown below removes them like any other.
    {
        std::lock_guard lock(mutex_);
        for (auto& k : warm) {
            kernels_[k->id()] = record{k, {}, {}, false};
            ++admitted_;
            all.push_back(k);
        }
    }
    auto remaining = std::make_shared<std::atomic<std::size_t>>(all.size());
    std::mutex m;
    std::condition_variable cv;
    for (auto& k : all) {
        shutdown(k, [&, remaining](std::optional<api_error>) {
            if (--*remaining == 0) {
                std::lock_guard lock(m);
                cv.notify_all();
            }
        });
    }
    std::unique_lock lock(m);
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return remaining->load() == 0; });
}

kernel_ptr kernel_manager::find(const std::string& tenant, const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = kernels_.find(id);
    if (it == kernels_.end() || it->second.k->tenant() != tenant) return nullptr;
    return it->second.k;
}

std::vector<kernel_ptr> kernel_manager::list(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    std::vector<kernel_ptr> out;
    for (const auto& [id, r] : kernels_)
        if (r.k->tenant() == tenant) out.push_back(r.k);
    return out;
}

std::size_t kernel_manager::count() const {
    std::lock_guard lock(mutex_);
    return kernels_.size();
}

// --- warm pool ----------------------------------------------------------------------------

kernel_ptr kernel_manager::take_from_pool_locked(const std::string& spec_name) {
    const auto it = warm_.find(spec_name);
    if (it == warm_.end()) return nullptr;
    while (!it->second.empty()) {
        auto k = std::move(it->second.front());
        it->second.pop_front();
        if (k->ready() && k->state() != kernel_state::dead) return k;
        k->close("warm kernel was not ready");  // died meanwhile: its watcher cleans up
    }
    return nullptr;
}

void kernel_manager::claim(const kernel_ptr& k, const std::string& tenant, const std::map<std::string, std::string>& env,
                           const kernel_policy& policy, done_kernel callback) {
    try {
        const auto* ks = specs_.find(k->spec_name());
        launcher_.set_cpu_shares(k->id(), ks != nullptr ? ks->limits.cpu_shares : 1024);
    } catch (const std::exception& e) {
        spdlog::warn("kernel {}: raising its CPU weight failed: {}", k->id(), e.what());
    }
    k->assign_tenant(tenant);
    k->set_policy(policy);
    k->touch();
    {
        std::lock_guard lock(mutex_);
        ++pool_claims_;
        kernels_[k->id()] = record{k, env, {}, false, k->last_activity_time()};
    }
    persist(k, env);
    spdlog::info("kernel {}: claimed from the warm pool", k->id());
    if (env.empty()) {
        callback(std::nullopt, k);
        return;
    }
    // The session's environment reaches the running kernel (and what it starts)
    // without a restart. No need to wait for the reply: the kernel reads its
    // shell requests in arrival order and is idle, so this cell is under way
    // before the caller can even open a socket and send its first request.
    nlohmann::json vars = env;
    k->run_silent("import os as _cg_os, json as _cg_json\n_cg_os.environ.update(_cg_json.loads(" +
                      nlohmann::json(vars.dump()).dump() + "))\ndel _cg_os, _cg_json",
                  [id = k->id()](const nlohmann::json& reply) {
                      if (!reply.is_object() || reply.value("status", "") != "ok")
                          spdlog::warn("kernel {}: setting its environment failed", id);
                  });
    callback(std::nullopt, k);
}

void kernel_manager::drop_from_pool(const kernel_ptr& k, const std::string& why) {
    {
        std::lock_guard lock(mutex_);
        auto& q = warm_[k->spec_name()];
        const auto it = std::find(q.begin(), q.end(), k);
        if (it == q.end()) return;
        q.erase(it);
    }
    spdlog::warn("warm kernel {}: {}; replacing it", k->id(), why);
    k->close(why);
    asio::post(launch_pool_, [this, k] {
        try {
            launcher_.remove(k->id());
        } catch (const std::exception& e) {
            spdlog::warn("warm kernel {}: removing its sandbox failed: {}", k->id(), e.what());
        }
        asio::post(ioc_, [this] { replenish(); });
    });
}

void kernel_manager::replenish() {
    std::vector<std::string> to_start;
    {
        std::lock_guard lock(mutex_);
        if (shutting_down_ || steady::now() < pool_backoff_until_) return;
        std::size_t starting = 0;
        for (const auto& [name, n] : pool_starting_) starting += n;
        for (const auto& [name, target] : config_.pool_size) {
            // A warm kernel is a kernel: the total limit applies to the pool too.
            while (warm_[name].size() + pool_starting_[name] < target && starting < config_.pool_concurrency &&
                   admitted_ + starting < config_.max_kernels) {
                ++pool_starting_[name];
                ++starting;
                to_start.push_back(name);
            }
        }
    }
    for (const auto& name : to_start) {
        auto k = std::make_shared<kernel>(protocol::make_uuid(), name, std::string(), reactor_, config_.kernel, metrics_);
        auto spec = spec_for(*k, {});
        spec.preload = config_.pool_preload;
        // Warming up runs at a low CPU weight, so it never slows live sessions.
        spec.limits.cpu_shares = 2;
        asio::post(launch_pool_, [this, k, spec, name] {
            launcher::sandbox_info info;
            try {
                info = launcher_.launch(spec);
            } catch (const std::exception& e) {
                ++metrics_.sandbox_start_failures;
                spdlog::error("warm pool: starting a {} kernel failed: {}", name, e.what());
                std::lock_guard lock(mutex_);
                --pool_starting_[name];
                ++pool_failures_;
                pool_backoff_until_ = steady::now() + std::chrono::seconds(5);
                return;
            }
            ++metrics_.sandbox_starts;
            const auto pid = info.pid;
            k->connect(std::move(info));
            watch_process(k, pid);
            wait_ready(k, [this, k, name](bool ok) {
                if (ok) {
                    // One throwaway cell pays the first execution's lazy set-up
                    // now, so the claimer's first cell (or its env) is fast.
                    k->run_silent("pass", [this, k, name](const nlohmann::json& reply) {
                        {
                            std::lock_guard lock(mutex_);
                            --pool_starting_[name];
                            if (reply.is_object() && !shutting_down_) warm_[name].push_back(k);
                        }
                        asio::post(ioc_, [this] { replenish(); });
                    });
                    return;
                }
                {
                    std::lock_guard lock(mutex_);
                    --pool_starting_[name];
                }
                if (!ok) {
                    k->close("warm kernel never became ready");
                    asio::post(launch_pool_, [this, k] {
                        try {
                            launcher_.remove(k->id());
                        } catch (...) {
                        }
                    });
                }
                replenish();
            });
        });
    }
}

void kernel_manager::gauges(std::string& out) const {
    std::map<std::string, int> by_state;
    for (auto s : {kernel_state::starting, kernel_state::idle, kernel_state::busy, kernel_state::restarting,
                   kernel_state::dead, kernel_state::terminating})
        by_state[std::string(to_string(s))] = 0;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, r] : kernels_) ++by_state[std::string(to_string(r.k->state()))];
    }
    {
        std::lock_guard lock(mutex_);
        out += "# HELP cellgate_pool_ready warm kernels ready to be claimed\n# TYPE cellgate_pool_ready gauge\n";
        for (const auto& [name, target] : config_.pool_size) {
            const auto ready = warm_.count(name) ? warm_.at(name).size() : 0;
            const auto starting = pool_starting_.count(name) ? pool_starting_.at(name) : 0;
            out += "cellgate_pool_ready{kernelspec=\"" + name + "\"} " + std::to_string(ready) + "\n";
            out += "cellgate_pool_starting{kernelspec=\"" + name + "\"} " + std::to_string(starting) + "\n";
            out += "cellgate_pool_target{kernelspec=\"" + name + "\"} " + std::to_string(target) + "\n";
        }
        out += "# TYPE cellgate_pool_claims_total counter\ncellgate_pool_claims_total " + std::to_string(pool_claims_) + "\n";
        out += "# TYPE cellgate_pool_misses_total counter\ncellgate_pool_misses_total " + std::to_string(pool_misses_) + "\n";
        out += "# TYPE cellgate_pool_start_failures_total counter\ncellgate_pool_start_failures_total " +
               std::to_string(pool_failures_) + "\n";
    }
    out += "# HELP cellgate_kernels kernels by execution state\n# TYPE cellgate_kernels gauge\n";
    for (const auto& [state, n] : by_state)
        out += "cellgate_kernels{state=\"" + state + "\"} " + std::to_string(n) + "\n";
}

}  // namespace cellgate::kernels
