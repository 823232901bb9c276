#include "kernels/kernel_manager.hpp"
#include "kernels/node_id.hpp"

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

std::string start_failure_message(const std::exception& launcher_error) {
    const std::string_view what = launcher_error.what();
    const auto at = what.find(launcher::ready_check_failed);
    if (at == std::string_view::npos) return "The kernel's sandbox could not be started";
    return "The kernel's sandbox could not be started: " + std::string(what.substr(at, 2000));
}

namespace {

std::map<std::string, warm_pool::target> pool_targets(const manager_config& c) {
    std::map<std::string, warm_pool::target> t;
    for (const auto& [name, n] : c.pool_size) {
        const auto max = c.pool_max.find(name);
        t[name] = {n, max != c.pool_max.end() ? std::max(n, max->second) : 4 * n};
    }
    return t;
}

}  // namespace

kernel_manager::kernel_manager(asio::io_context& ioc, launcher::sandbox_launcher& launcher, wire::zmq_reactor& reactor,
                               const kernelspec_registry& specs, metrics::registry& metrics, manager_config config)
    : ioc_(ioc), launcher_(launcher), reactor_(reactor), specs_(specs), metrics_(metrics),
      config_(std::move(config)), launch_pool_(config_.launch_threads),
      launches_(config_.max_launches_per_tenant, [this](launch_gate::job j) { asio::post(launch_pool_, std::move(j)); }),
      tick_timer_(ioc), cell_timer_(ioc), admission_(config_.max_kernels, config_.max_kernels_per_tenant),
      pool_(pool_targets(config_), config_.pool_concurrency, config_.pool_growth_window) {
    metrics_.add_gauge_source([this](std::string& out) { gauges(out); });
}

kernel_manager::~kernel_manager() {
    tick_timer_.cancel();
    cell_timer_.cancel();
    gate_pool_.join();
    launch_pool_.join();
}

void kernel_manager::start() {
    tick();
    check_cells();
    replenish();
}

void kernel_manager::persist(const kernel_ptr& k, const std::map<std::string, std::string>& env) {
    if (!store_) return;
    persisted_kernel row;  // the pause row is written apart (state_store::set_paused)
    row.id = k->id();
    row.tenant = k->tenant();
    row.spec_name = k->spec_name();
    row.env = env;
    row.policy = k->policy();
    row.created = k->created();
    row.last_activity = k->last_activity_time();
    store_->put_kernel(row);
}

void kernel_manager::adopt(const persisted_kernel& row, const std::optional<launcher::sandbox_info>& running) {
    auto k = std::make_shared<kernel>(row.id, row.spec_name, row.tenant, reactor_, config_.kernel, metrics_);
    k->set_policy(row.policy);
    k->restore_times(row.created, row.last_activity);
    {
        std::lock_guard lock(mutex_);
        admission_.readmit(row.tenant);  // already admitted once; never refused now
        reclaim_volumes_locked(row.id, row.policy.volumes);
        kernels_.insert_or_assign(row.id, record(k, new_budget(), row.env, row.last_activity));
    }
    if (!running) {
        spdlog::warn("kernel {}: its sandbox ended while the gateway was down; restarting it (files kept)", row.id);
        ++metrics_.kernel_deaths;
        k->set_state(kernel_state::dead);
        do_restart(k, [](std::optional<failure>) {}, true);
        return;
    }
    if (k->policy().network) {
        try {
            prepare_egress(*k, spec_for(*k, row.env));
        } catch (const std::exception& e) {
            spdlog::error("kernel {}: its egress path could not be set up again: {}", k->id(), e.what());
        }
    }
    k->nudge_on_control(true);
    bring_up(k, *running, [k](bool ok) {
        k->nudge_on_control(false);
        if (ok) spdlog::info("kernel {}: re-attached to its running sandbox", k->id());
        else spdlog::warn("kernel {}: re-attached, but it did not answer kernel_info in time", k->id());
    });
}

launcher::sandbox_spec kernel_manager::spec_for(const kernel& k, const std::map<std::string, std::string>& env) const {
    launcher::sandbox_spec spec;  // a spec removed from the config: the launcher's defaults
    if (const auto* ks = specs_.find(k.spec_name())) {
        spec = ks->to_sandbox_spec(k.id(), env);
    } else {
        spec.id = k.id();
        spec.env = env;
    }
    for (const auto& v : k.policy().volumes) spec.volumes.push_back({v.id, v.path, v.read_only});
    if (k.policy().network && !config_.launcher_rules.egress_root.empty())
        spec.egress_dir = (config_.launcher_rules.egress_root / k.id()).string();
    return spec;
}

void kernel_manager::on_egress(std::function<void(const kernel&, const std::filesystem::path&)> hook) {
    egress_hook_ = std::move(hook);
}

void kernel_manager::prepare_egress(const kernel& k, const launcher::sandbox_spec& spec) {
    if (spec.egress_dir.empty()) return;
    if (!egress_hook_) throw std::runtime_error("this gateway runs no egress proxy");
    namespace fs = std::filesystem;
    const fs::path dir(spec.egress_dir);
    // 0711 above: a sandbox's uid may pass through to its own socket but
    // list nobody's; gVisor's gofer opens the mount as that uid.
    fs::create_directories(dir.parent_path());
    fs::permissions(dir.parent_path(), fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    fs::create_directory(dir);
    fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                             fs::perms::others_exec);
    egress_hook_(k, dir);
}

void kernel_manager::on_removed(std::function<void(const std::string&)> listener) {
    std::lock_guard lock(mutex_);
    removal_listeners_.push_back(std::move(listener));
}

void kernel_manager::set_tenant_quota(const std::string& tenant, std::size_t max_kernels) {
    std::lock_guard lock(mutex_);
    admission_.set_quota(tenant, max_kernels);
}

void kernel_manager::admit(const std::string& tenant, const std::string& spec_name,
                           const std::map<std::string, std::string>& env, std::size_t count,
                           std::function<void(std::optional<failure>)> then) {
    if (specs_.find(spec_name) == nullptr)
        return then(failure{failure_kind::no_such_spec, "No such kernel spec: '" + spec_name + "'"});
    try {
        launcher::validate_env(env, config_.launcher_rules);  // the same rules the launcher applies
    } catch (const launcher::spec_error& e) {
        return then(failure{failure_kind::invalid, e.what()});
    }
    auto local = [this, tenant, count, then = std::move(then)](std::optional<failure> refused) {
        if (!refused) refused = admit_locally(tenant, count);
        then(std::move(refused));
    };
    if (!admission_gate_) return local(std::nullopt);
    std::size_t limit = 0;
    {
        std::lock_guard lock(mutex_);
        limit = admission_.limit(tenant);
    }
    asio::post(gate_pool_, [this, tenant, count, limit, local = std::move(local)] {
        auto refused = admission_gate_(tenant, count, limit);
        asio::post(ioc_, [local, refused = std::move(refused)] { local(refused); });
    });
}

std::optional<failure> kernel_manager::admit_locally(const std::string& tenant, std::size_t count) {
    std::lock_guard lock(mutex_);
    if (shutting_down_) return failure{failure_kind::unavailable, "The gateway is shutting down"};
    // Counted now, so concurrent starts cannot race past the limits.
    for (std::size_t i = 0; i < count; ++i) {
        if (auto why = admission_.admit(tenant)) {
            for (std::size_t j = 0; j < i; ++j) admission_.release(tenant);
            return failure{failure_kind::over_quota,
                           *why + (count > 1 ? "; " + std::to_string(count) + " sessions were asked for, " +
                                                   std::to_string(i) + " more fit, none was started"
                                             : std::string())};
        }
    }
    return std::nullopt;
}

void kernel_manager::start_kernel(const std::string& tenant, const std::string& spec_name,
                                  const std::map<std::string, std::string>& env, done_kernel callback,
                                  std::optional<kernel_policy> policy) {
    admit(tenant, spec_name, env, 1, [this, tenant, spec_name, env, callback, policy](std::optional<failure> refused) {
        if (refused) return callback(std::move(refused), nullptr);
        start_admitted(tenant, spec_name, env, callback, policy);
    });
}

void kernel_manager::start_admitted(const std::string& tenant, const std::string& spec_name,
                                    const std::map<std::string, std::string>& env, done_kernel callback,
                                    std::optional<kernel_policy> policy) {
    const auto p = policy.value_or(config_.policies.resolve(surface::jupyter, spec_name, tenant));
    const auto id = make_node_id();
    if (auto busy = claim_volumes(tenant, id, p.volumes)) {
        std::lock_guard lock(mutex_);
        admission_.release(tenant);
        return callback(std::move(busy), nullptr);
    }
    kernel_ptr warm;
    {
        std::lock_guard lock(mutex_);
        // A warm sandbox has no egress path and no volumes: such a session starts its own.
        if (!p.network && p.volumes.empty())
            warm = pool_.take(spec_name, [](const kernel& k) { return k.ready() && k.state() != kernel_state::dead; });
    }
    if (warm) {
        claim(warm, tenant, env, p, std::move(callback));
        asio::post(ioc_, [this] { replenish(); });
        return;
    }
    if (!p.network && p.volumes.empty()) {
        std::lock_guard lock(mutex_);
        if (pool_.has_pool(spec_name)) {
            // A miss waits for the next kernel of this spec to be ready,
            // whichever start brings it (warm_pool.hpp, "Bursts").
            auto cb = std::make_shared<done_kernel>(std::move(callback));
            pool_.wait(spec_name,
                       {tenant, [this, tenant, env, p, cb](kernel_ptr k) { claim(k, tenant, env, p, *cb); },
                        [this, tenant, cb](const std::string& why) {
                            bool stopping = false;
                            {
                                std::lock_guard held(mutex_);
                                admission_.release(tenant);
                                stopping = shutting_down_;
                            }
                            (*cb)(failure{stopping ? failure_kind::unavailable : failure_kind::start_failed, why},
                                  nullptr);
                        }});
            asio::post(ioc_, [this] { replenish(); });
            return;
        }
    }
    auto k = std::make_shared<kernel>(id, spec_name, tenant, reactor_, config_.kernel, metrics_);
    k->set_policy(p);
    launches_.submit(tenant, [this, k, spec = spec_for(*k, env), env, callback = std::move(callback)] {
        launch_new(k, spec, env, callback);
    });
}

// On the launch pool: the sandbox, then the kernel in the registry, then
// the wait for its first reply. Its admission slot is given back on failure.
void kernel_manager::launch_new(const kernel_ptr& k, const launcher::sandbox_spec& spec,
                                const std::map<std::string, std::string>& env, const done_kernel& callback) {
    const auto t0 = steady::now();
    auto refuse = [&](failure f) {
        ++metrics_.sandbox_start_failures;
        {
            std::lock_guard lock(mutex_);
            admission_.release(k->tenant());
            release_volumes_locked(k->id());
        }
        callback(std::move(f), nullptr);
    };
    launcher::sandbox_info info;
    try {
        prepare_egress(*k, spec);
        info = launcher_.launch(spec);
    } catch (const launcher::spec_error& e) {
        spdlog::warn("kernel {}: refused: {}", k->id(), e.what());
        return refuse(failure{failure_kind::invalid, e.what()});
    } catch (const std::exception& e) {
        spdlog::error("kernel {}: sandbox start failed: {}", k->id(), util::log_safe(e.what()));
        return refuse(failure{failure_kind::start_failed, start_failure_message(e)});
    }
    ++metrics_.sandbox_starts;
    bool stopping = false;
    {
        std::lock_guard lock(mutex_);
        // shutdown_all has taken its list already: registering now would
        // leave this sandbox running after the gateway is gone.
        stopping = shutting_down_;
        if (!stopping) kernels_.insert_or_assign(k->id(), record(k, new_budget(), env, k->last_activity_time()));
    }
    if (stopping) {
        try {
            launcher_.remove(k->id());
        } catch (const std::exception& e) {
            spdlog::error("kernel {}: removing its sandbox failed: {}", k->id(), e.what());
        }
        {
            std::lock_guard lock(mutex_);
            admission_.release(k->tenant());
        }
        return callback(failure{failure_kind::unavailable, "The gateway is shutting down"}, nullptr);
    }
    persist(k, env);
    bring_up(k, std::move(info), [this, k, t0, callback](bool ok) {
        metrics_.sandbox_start_seconds.observe(std::chrono::duration<double>(steady::now() - t0).count());
        if (!ok) spdlog::warn("kernel {}: not ready in time after start", k->id());
        spdlog::info("kernel {}: started ({} ms)", k->id(),
                     std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count());
        callback(std::nullopt, k);
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

void kernel_manager::bring_up(const kernel_ptr& k, launcher::sandbox_info sandbox, std::function<void(bool)> then) {
    const auto pid = sandbox.pid;
    k->connect(std::move(sandbox));
    watch_process(k, pid);
    wait_ready(k, std::move(then));
}

void kernel_manager::wait_ready(const kernel_ptr& k, std::function<void(bool)> then) {
    auto waiter = std::make_shared<ready_waiter>(ioc_, k, steady::now() + config_.ready_timeout,
                                                 config_.nudge_interval, std::move(then));
    asio::post(ioc_, [waiter] { waiter->step(); });
}

std::optional<launcher::sandbox_usage> kernel_manager::sandbox_usage(const std::string& kernel_id, bool reset_peak) {
    try {
        return launcher_.usage(kernel_id, reset_peak);
    } catch (const std::exception& e) {
        spdlog::debug("kernel {}: no usage: {}", kernel_id, e.what());
        return std::nullopt;
    }
}

void kernel_manager::shutdown(const kernel_ptr& k, done callback, const std::string& reason) {
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end()) {
            callback(failure{failure_kind::no_such_kernel, "No such kernel"});
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
        wait_for_copies(k->id());  // a snapshot being copied from its workspace
        bool removed = true;
        try {
            launcher_.remove(k->id());
        } catch (const std::exception& e) {
            removed = false;
            spdlog::error("kernel {}: removing its sandbox failed: {}; its volumes stay claimed (a writer that may "
                          "still run keeps its claim)", k->id(), e.what());
        }
        std::vector<std::function<void(const std::string&)>> listeners;
        {
            std::lock_guard lock(mutex_);
            admission_.release(k->tenant());
            // A writer's claim goes only with its sandbox: the next writer's
            // owner remapping must never race a live one (review turn 3, L5).
            if (removed) release_volumes_locked(k->id());
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
    std::vector<warm_pool::waiter> waiters;
    {
        std::lock_guard lock(mutex_);
        shutting_down_ = true;
        // Paused kernels outlive the gateway: their images, files and rows
        // stay for the next start to take back.
        for (auto& [id, r] : kernels_)
            if (r.k->state() != kernel_state::paused) all.push_back(r.k);
        warm = pool_.drain();
        waiters = pool_.drain_waiters();
    }
    for (auto& w : waiters) w.refuse("The gateway is shutting down");
    // Warm kernels belong to nobody: they are registered for a moment so the
    // shutdown below removes them like any other.
    {
        std::lock_guard lock(mutex_);
        for (auto& k : warm) {
            kernels_.insert_or_assign(k->id(), record(k, new_budget()));
            admission_.readmit(k->tenant());
            all.push_back(k);
        }
    }
    auto remaining = std::make_shared<std::atomic<std::size_t>>(all.size());
    std::mutex m;
    std::condition_variable cv;
    for (auto& k : all) {
        shutdown(k, [&, remaining](std::optional<failure>) {
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

std::set<std::string> kernel_manager::spec_names_in_use() const {
    std::lock_guard lock(mutex_);
    std::set<std::string> out;
    for (const auto& [id, r] : kernels_) out.insert(r.k->spec_name());
    return out;
}

std::size_t kernel_manager::count() const {
    std::lock_guard lock(mutex_);
    return kernels_.size();
}

// --- warm pool ----------------------------------------------------------------------------

void kernel_manager::gauges(std::string& out) const {
    std::map<std::string, int> by_state;
    for (auto s : {kernel_state::starting, kernel_state::idle, kernel_state::busy, kernel_state::restarting,
                   kernel_state::dead, kernel_state::terminating})
        by_state[std::string(to_string(s))] = 0;
    std::vector<kernel_ptr> all;  // for the sandbox count below, asked outside the lock
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, r] : kernels_) {
            ++by_state[std::string(to_string(r.k->state()))];
            all.push_back(r.k);
        }
    }
    {
        std::lock_guard lock(mutex_);
        pool_.render(out);
    }
    out += "# HELP cellgate_kernels kernels by execution state\n# TYPE cellgate_kernels gauge\n";
    for (const auto& [state, n] : by_state)
        out += "cellgate_kernels{state=\"" + state + "\"} " + std::to_string(n) + "\n";
    // Sandboxes by runtime and, for gVisor, platform (kvm or ptrace: which
    // one the launcher's probe chose).
    std::map<std::pair<std::string, std::string>, int> by_runtime;
    int merging = 0;
    std::optional<launcher::sandbox_info> newest_runsc;
    for (const auto& k : all)
        if (const auto sb = k->sandbox()) {
            ++by_runtime[{sb->runtime, sb->platform}];
            merging += sb->memory_merge ? 1 : 0;
            if (sb->runtime == "runsc" && (!newest_runsc || sb->created_unix_ms > newest_runsc->created_unix_ms))
                newest_runsc = sb;
        }
    out += "# HELP cellgate_sandboxes running sandboxes by runtime and platform\n# TYPE cellgate_sandboxes gauge\n";
    for (const auto& [key, n] : by_runtime)
        out += "cellgate_sandboxes{runtime=\"" + key.first + "\",platform=\"" + key.second + "\"} " +
               std::to_string(n) + "\n";
    // Why gVisor's newest sandbox got its platform ("auto" runs ptrace until
    // a background probe proves kvm; the launcher's log says the same).
    if (newest_runsc) {
        std::string reason;
        for (const char c : newest_runsc->platform_reason) {
            if (c == '\\' || c == '"') reason += '\\';
            reason += c == '\n' ? ' ' : c;
        }
        out += "# HELP cellgate_runsc_platform_info gVisor's platform for new sandboxes, and why\n"
               "# TYPE cellgate_runsc_platform_info gauge\ncellgate_runsc_platform_info{platform=\"" +
               newest_runsc->platform + "\",reason=\"" + reason + "\"} 1\n";
    }
    // Whose kernels opted into KSM with a fixed layout (--memory-merge on; docs/memory.md).
    out += "# HELP cellgate_sandboxes_memory_merge running sandboxes whose kernels merge their pages\n"
           "# TYPE cellgate_sandboxes_memory_merge gauge\ncellgate_sandboxes_memory_merge " +
           std::to_string(merging) + "\n";
}

}  // namespace cellgate::kernels
