#pragma once

// The limits a session lives by, and where they come from. One model for
// every surface: a kernel started over /api/kernels (JupyterLab, a Kernel
// Gateway client) and a /v1 agent session carry the same kernel_policy, and
// the core enforces it (kernels/cell_watch.hpp for cells sent over the
// Jupyter WebSocket, agent/execution.hpp for /v1 cells, the manager's tick for
// idle and lifetime). Only the defaults differ per surface.
//
// Resolution, most specific last: the surface's defaults, then the
// kernelspec's policy, then the tenant's (from its token entry). A layer sets
// only the limits it names; each may name surface-only values under
// "jupyter" or "agent".

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>
#include <stdexcept>
#include <string>

namespace cellgate::kernels {

// Zero means "none" for every member.
// A named volume in a session: its id (the launcher's), its owner's name for
// it, where it is mounted (/volumes/<name>), and how.
struct volume_attachment {
    std::string id, name, path;
    bool read_only = false;
};

struct kernel_policy {
    std::chrono::seconds exec_timeout{300};     // per cell, from when the kernel starts it
    std::chrono::seconds idle_timeout{0};       // culled after this long without activity
    std::chrono::seconds lifetime{0};           // removed this long after it started
    std::size_t output_limit_bytes = 1u << 20;  // stdout + stderr per cell
    std::size_t result_limit_bytes = 32u << 20; // rich outputs (plots, tables) per cell
    std::uint64_t upload_limit_bytes = 256u << 20;
    // The session's network policy ({"allow": […], "deny": […], "presets": […]},
    // checked by the API before it gets here). Present: the sandbox has a path
    // to the egress proxy; absent: loopback only, for its whole life.
    std::optional<nlohmann::json> network{};
    // What idle_timeout does: delete the session (false), or pause it (true:
    // its files, and its memory where the runtime checkpoints, are kept).
    bool pause_on_idle = false;
    // A paused session resumes by itself when a request needs its kernel.
    bool auto_resume = true;
    // What the end of its lifetime does: delete it (false), or pause it (the
    // E2B surface's autoPause; a later connect resumes it with a new end).
    bool pause_at_end = false;
    // Named volumes mounted at start (at most 8; one writer each at a time).
    std::vector<volume_attachment> volumes{};
};

enum class surface { jupyter, agent };

// The limits one layer sets; the others stay as they were.
struct policy_overrides {
    std::optional<std::chrono::seconds> exec_timeout, idle_timeout, lifetime;
    std::optional<std::size_t> output_limit_bytes, result_limit_bytes;
    std::optional<std::uint64_t> upload_limit_bytes;
    std::optional<bool> pause_on_idle, auto_resume;

    void apply_to(kernel_policy& p) const;
};

// One layer: limits for both surfaces, then those for one.
struct policy_layer {
    policy_overrides both, jupyter, agent;
    void apply_to(kernel_policy& p, surface s) const;
};

class policy_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// {"exec_timeout": s, "idle_timeout": s, "lifetime": s, "output_limit": bytes,
//  "result_limit": bytes, "upload_limit": bytes, "on_idle": "delete"|"pause",
//  "auto_resume": bool, "jupyter": {…}, "agent": {…}}.
// Throws policy_error naming the bad key (`where` says which layer).
policy_layer policy_layer_from_json(const nlohmann::json& j, const std::string& where);

struct policy_book {
    // Jupyter surface: JupyterLab users run long cells, so the defaults are
    // wider than an agent's; an operator relaxes them further per kernelspec
    // or tenant (0 = none). See docs/limits.md.
    kernel_policy jupyter{.exec_timeout = std::chrono::seconds(600), .idle_timeout = std::chrono::seconds(0),
                          .lifetime = std::chrono::seconds(0), .output_limit_bytes = 16u << 20,
                          .result_limit_bytes = 64u << 20, .upload_limit_bytes = 256u << 20};
    kernel_policy agent{.exec_timeout = std::chrono::seconds(300), .idle_timeout = std::chrono::seconds(600),
                        .lifetime = std::chrono::seconds(86400), .output_limit_bytes = 1u << 20,
                        .result_limit_bytes = 32u << 20, .upload_limit_bytes = 256u << 20};
    std::map<std::string, policy_layer> by_kernelspec, by_tenant;

    kernel_policy resolve(surface s, const std::string& spec_name, const std::string& tenant) const;
};

nlohmann::json to_json(const kernel_policy& p);

}  // namespace cellgate::kernels
