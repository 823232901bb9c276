// The kernel manager's warm pool: claiming a ready kernel, dropping one that
// died in the pool, and keeping the pool full (its books: warm_pool.hpp).
#include "kernels/kernel_manager.hpp"
#include "kernels/node_id.hpp"

#include "util/log_safe.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace cellgate::kernels {

namespace asio = boost::asio;

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
        kernels_.insert_or_assign(k->id(), record(k, new_budget(), env, k->last_activity_time()));
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

std::map<std::string, std::size_t> kernel_manager::admitted_by_tenant() const {
    std::lock_guard lock(mutex_);
    return admission_.by_tenant();
}

std::set<std::string> kernel_manager::tenants_held() const {
    std::lock_guard lock(mutex_);
    std::set<std::string> out;
    for (const auto& [tenant, n] : admission_.by_tenant())
        if (n > 0) out.insert(tenant);
    for (const auto& [id, s] : snapshots_) out.insert(s.tenant);
    return out;
}

kernel_manager::load_figures kernel_manager::load() const {
    std::lock_guard lock(mutex_);
    return {admission_.admitted(), admission_.max_total(), pool_.ready(), pool_.waiting()};
}

void kernel_manager::drop_from_pool(const kernel_ptr& k, const std::string& why) {
    {
        std::lock_guard lock(mutex_);
        if (!pool_.remove(k)) return;
    }
    spdlog::warn("warm kernel {}: {}; replacing it", k->id(), why);
    stop_warm(k, why, [this] { asio::post(ioc_, [this] { replenish(); }); });
}

void kernel_manager::stop_warm(const kernel_ptr& k, const std::string& why, std::function<void()> then) {
    k->close(why);
    asio::post(launch_pool_, [this, k, then = std::move(then)] {
        try {
            launcher_.remove(k->id());
        } catch (const std::exception& e) {
            spdlog::warn("warm kernel {}: removing its sandbox failed: {}", k->id(), e.what());
        }
        if (then) then();
    });
}

void kernel_manager::set_pool(const std::string& spec, std::size_t size) {
    std::vector<kernel_ptr> stale;
    {
        std::lock_guard lock(mutex_);
        if (shutting_down_) return;
        stale = pool_.reset(spec, size, steady::now(), config_.template_pool_idle);
    }
    for (auto& k : stale) stop_warm(k, "its kernelspec changed");
    asio::post(ioc_, [this] { replenish(); });
}

void kernel_manager::replenish() {
    std::vector<warm_pool::start> to_start;
    std::vector<kernel_ptr> extra;
    {
        std::lock_guard lock(mutex_);
        if (shutting_down_) return;
        const auto admitted = admission_.admitted();
        const auto now = steady::now();
        to_start = pool_.plan(now, admitted < admission_.max_total() ? admission_.max_total() - admitted : 0);
        extra = pool_.trim(now);
    }
    for (auto& k : extra) {
        spdlog::info("warm kernel {}: above the pool's target since misses stopped; stopping it", k->id());
        stop_warm(k, "the warm pool shrank");
    }
    for (const auto& order : to_start) {
        auto k = std::make_shared<kernel>(make_node_id(), order.spec, std::string(), reactor_, config_.kernel,
                                          metrics_);
        auto spec = spec_for(*k, {});
        if (!order.demand) {
            // A template's own modules, or the operator's for a Python pool.
            const auto* ks = specs_.find(order.spec);
            if (spec.preload.empty() && ks != nullptr && ks->language == "python") spec.preload = config_.pool_preload;
            // Warming up runs at a low CPU weight, so it never slows live sessions.
            spec.limits.cpu_shares = 2;
        }
        // A start for waiting claims is a plain cold start (no preload: its
        // claimer is waiting) at the spec's own weight.
        asio::post(launch_pool_, [this, k, spec, order] { start_pooled(k, spec, order); });
    }
}

// On the launch pool: one start of replenish()'s plan, to its end. Its kernel
// goes to a waiting claim or into the pool (warm_pool::start_ended).
void kernel_manager::start_pooled(const kernel_ptr& k, const launcher::sandbox_spec& spec,
                                  const warm_pool::start& order) {
    const auto& name = order.spec;
    // The start's end, with its kernel when it is ready: to a waiter, the pool,
    // or (not ready) away, refusing the waiter a failed claim start was for.
    auto ended = [this, k, order](bool ready) {
        std::optional<warm_pool::waiter> w;
        {
            std::lock_guard lock(mutex_);
            ready = ready && !shutting_down_;
            w = pool_.start_ended(order.spec, order.demand, ready ? k : nullptr);
        }
        if (!ready) {
            k->close("warm kernel never became ready");
            asio::post(launch_pool_, [this, k] {
                try {
                    launcher_.remove(k->id());
                } catch (...) {
                }
            });
            if (w) w->refuse("The kernel's sandbox could not be started");
        } else if (w) {
            // The claim talks to the launcher (CPU weight): off this reply's thread.
            spdlog::info("kernel {}: goes to a claim that found the pool empty", k->id());
            asio::post(launch_pool_, [k, w = std::move(*w)] { w.give(k); });
        }
        asio::post(ioc_, [this] { replenish(); });
    };
    launcher::sandbox_info info;
    try {
        info = launcher_.launch(spec);
    } catch (const std::exception& e) {
        ++metrics_.sandbox_start_failures;
        spdlog::error("warm pool: starting a {} kernel failed: {}", name, util::log_safe(e.what()));
        std::optional<warm_pool::waiter> w;
        {
            std::lock_guard lock(mutex_);
            if (order.demand) w = pool_.start_ended(name, true, nullptr);
            else pool_.start_failed(name, steady::now());
        }
        if (w) w->refuse(start_failure_message(e));
        asio::post(ioc_, [this] { replenish(); });
        return;
    }
    ++metrics_.sandbox_starts;
    bring_up(k, std::move(info), [k, ended](bool ok) {
        if (!ok) return ended(false);
        // One throwaway cell pays the first execution's lazy set-up now, so
        // the claimer's first cell (or its env) is fast.
        k->run_silent("pass", [ended](const nlohmann::json& reply) { ended(reply.is_object()); });
    });
}

}  // namespace cellgate::kernels
