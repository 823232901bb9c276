#pragma once

// What a new session asks for, as every surface hands it to the core
// (core/sessions.hpp), and the policy it gets: pure, so unit tests and the
// HTTP fuzz target run exactly the server's rules.

#include "kernels/policy.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::agent { struct agent_limits; }

namespace cellgate::core {

// A named volume to mount: the tenant's volume `name`, at `path` ("" for
// /volumes/<name>), read-only or as its one writer.
struct volume_request {
    std::string name;
    std::string path;
    bool read_only = false;
};

struct session_request {
    std::string tenant;
    // Whose defaults the policy starts from (then the kernelspec's and the
    // tenant's layers, as the operator set them).
    kernels::surface surface = kernels::surface::agent;
    std::string kernelspec;     // "" = the default kernelspec
    // A template of the tenant's, "name[:tag]" (its kernelspec; "" = none).
    std::string template_ref;
    // A snapshot id ("" = a fresh kernel). Its session runs what the source
    // ran (kernelspec, environment, network, volumes, limits): the request
    // may then ask only for other limits.
    std::string from_snapshot;
    std::map<std::string, std::string> env;  // KERNEL_* names (checked by the surface)
    // What the request asks of the policy. A time or size is held to its
    // ceiling: the server's maximum, or what the operator gave this
    // kernelspec or tenant when that is more. No idle limit (0) is granted
    // only to a session with a lifetime, which ends it anyway.
    kernels::policy_overrides limits;
    // Whether its lifetime's end pauses it instead of deleting it (E2B's
    // autoPause); unset: as the policy says.
    std::optional<bool> pause_at_end;
    // {"allow", "deny", "preset"}; normalized and checked here (400).
    std::optional<nlohmann::json> network;
    std::vector<volume_request> volumes;  // at most 8
};

// A session of `tenant` that asks for nothing more: the surface's defaults
// and the default kernelspec. Callers fill in what their request asks.
inline session_request session_for(std::string tenant, kernels::surface surface = kernels::surface::agent) {
    session_request r;
    r.tenant = std::move(tenant);
    r.surface = surface;
    return r;
}

// The policy `r` gets over `base` (what the operator set for its kernelspec
// and tenant, or its snapshot's): each time or size it asks for, held to its
// ceiling (see session_request::limits).
kernels::kernel_policy policy_for(const session_request& r, const kernels::kernel_policy& base,
                                  const agent::agent_limits& limits);

}  // namespace cellgate::core
