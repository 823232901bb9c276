#include "core/sessions.hpp"

#include "util/api_error.hpp"

#include <algorithm>

namespace cellgate::core {

sessions::sessions(kernels::kernel_manager& kernels, const agent::agent_limits& limits, const network_settings* network)
    : kernels_(kernels), limits_(limits), network_(network) {}

std::vector<kernels::volume_attachment> sessions::attachments(const session_request& r) const {
    if (r.volumes.size() > 8) throw api_exception(400, "A session mounts at most 8 volumes");
    std::vector<kernels::volume_attachment> out;
    for (const auto& ask : r.volumes) {
        const auto v = kernels_.find_volume(r.tenant, ask.name);
        if (!v) throw api_exception(404, "No such volume: '" + ask.name.substr(0, 64) + "'");
        const auto path = ask.path.empty() ? "/volumes/" + ask.name : ask.path;
        for (const auto& o : out)
            if (o.id == v->id || o.path == path) throw api_exception(400, "a volume, and a path, may appear once");
        out.push_back({v->id, v->name, path, ask.read_only});
    }
    return out;
}

void sessions::start(const session_request& r, kernels::kernel_manager::done_kernel done) {
    if (!r.from_snapshot.empty()) {
        if (!r.kernelspec.empty() || !r.template_ref.empty() || !r.env.empty() || r.network || !r.volumes.empty())
            throw api_exception(400, "A session started from a snapshot runs what its source ran: its kernelspec, "
                                     "environment, network and volumes cannot be chosen");
        const auto snap = kernels_.find_snapshot(r.tenant, r.from_snapshot);
        if (!snap) throw api_exception(404, "No such snapshot: '" + r.from_snapshot.substr(0, 64) + "'");
        kernels_.start_from_snapshot(r.tenant, snap->id, 1, policy_for(r, snap->policy, limits_),
                                     [done = std::move(done)](std::optional<kernels::failure> f,
                                                              std::vector<kernels::kernel_ptr> started) {
                                         if (f) return done(std::move(f), nullptr);
                                         done(std::nullopt, started.front());
                                     });
        return;
    }
    auto name = r.kernelspec.empty() ? kernels_.specs().default_name() : r.kernelspec;
    if (!r.template_ref.empty()) {
        const auto ks = templates_ ? templates_->kernelspec_for(r.tenant, r.template_ref) : std::nullopt;
        if (!ks) throw api_exception(404, "No template '" + r.template_ref.substr(0, 140) + "'");
        name = *ks;
    } else if (!r.kernelspec.empty() && kernels_.specs().find(name) && !kernels_.specs().find_for(name, r.tenant)) {
        // Another tenant's template: as unknown to this one as a name nobody used.
        throw api_exception(404, "No such kernel spec: '" + name.substr(0, 64) + "'");
    }
    auto policy = policy_for(r, kernels_.config().policies.resolve(r.surface, name, r.tenant), limits_);
    if (r.network) {
        static const network_settings none;
        policy.network = normalize_network(*r.network, network_ ? *network_ : none);
    }
    policy.volumes = attachments(r);
    kernels_.start_kernel(r.tenant, name, r.env, std::move(done), std::move(policy));
}

void sessions::end_at(const kernels::kernel_ptr& k, std::chrono::system_clock::time_point end_at) {
    const auto left = std::chrono::ceil<std::chrono::seconds>(end_at - k->created());
    k->change_policy([&](kernels::kernel_policy& p) {
        p.lifetime = std::max(left, std::chrono::seconds(1));
        p.idle_timeout = std::chrono::seconds(0);
    });
}

}  // namespace cellgate::core
