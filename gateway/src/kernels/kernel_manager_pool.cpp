// The kernel manager's warm pool: claiming a ready kernel, dropping one that
// died in the pool, and keeping the pool full (its books: warm_pool.hpp).
#include "kernels/kernel_manager.hpp"

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

void kernel_manager::drop_from_pool(const kernel_ptr& k, const std::string& why) {
    {
        std::lock_guard lock(mutex_);
        if (!pool_.remove(k)) return;
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
        if (shutting_down_) return;
        const auto admitted = admission_.admitted();
        to_start = pool_.plan(steady::now(), admitted < admission_.max_total() ? admission_.max_total() - admitted : 0);
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
                pool_.start_failed(name, steady::now());
                return;
            }
            ++metrics_.sandbox_starts;
            bring_up(k, std::move(info), [this, k, name](bool ok) {
                if (ok) {
                    // One throwaway cell pays the first execution's lazy set-up
                    // now, so the claimer's first cell (or its env) is fast.
                    k->run_silent("pass", [this, k, name](const nlohmann::json& reply) {
                        {
                            std::lock_guard lock(mutex_);
                            pool_.start_ended(name, reply.is_object() && !shutting_down_ ? k : nullptr);
                        }
                        asio::post(ioc_, [this] { replenish(); });
                    });
                    return;
                }
                {
                    std::lock_guard lock(mutex_);
                    pool_.start_ended(name, nullptr);
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

}  // namespace cellgate::kernels
