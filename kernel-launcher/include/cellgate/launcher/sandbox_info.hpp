#pragma once

#include "cellgate/launcher/sandbox_spec.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace cellgate::launcher {

// How the host reaches the kernel: five unix sockets in the sandbox's run dir.
struct kernel_endpoints {
    std::string shell, iopub, stdin_, control, hb;  // "ipc:///run/cellgate/…/kernel/k-1", …
    std::string key;                                 // HMAC key; secret, never logged
    std::string signature_scheme = "hmac-sha256";
    std::string connection_file;                     // host-side copy, root-only
};

// A running sandbox, as launch() returns it and list() reports it.
struct sandbox_info {
    std::string id;
    std::string image;      // resolved rootfs path
    std::string runtime;
    std::string platform;   // runsc's platform ("kvm", "ptrace"); empty under runc
    std::string platform_reason;  // why that platform (runsc_platform)
    bool memory_merge = false;  // the kernel merges its pages (--memory-merge on, runc only)
    std::string run_dir;
    std::string workspace_dir;
    std::int64_t pid = 0;   // host pid of the sandbox's init
    // The kernel was forked from the image's zygote (launcher_config::zygote);
    // kernel_pid is then its supervisor's host pid, which signals go to.
    bool zygote = false;
    std::int64_t kernel_pid = 0;
    std::uint32_t host_uid_base = 0;
    std::int64_t created_unix_ms = 0;
    sandbox_spec spec;
    kernel_endpoints endpoints;
    std::map<std::string, double> step_ms;  // how long each launch step took
};

enum class sandbox_state { creating, running, stopped, missing };

struct sandbox_status {
    std::string id;
    sandbox_state state = sandbox_state::missing;
    std::int64_t pid = 0;
    bool oom_killed = false;         // the cgroup's OOM killer fired
    std::uint64_t memory_bytes = 0;  // current usage
    std::uint32_t pids = 0;          // current tasks
    std::optional<sandbox_info> info;  // when the run dir is still there
};

// What a sandbox's cgroup has counted: the CPU time of all its tasks since it
// began, and the highest memory use since the last reset of the peak (or
// its start). The peak is reset to the current use by usage(id, true).
struct sandbox_usage {
    std::uint64_t cpu_ns = 0;
    std::uint64_t memory_bytes = 0;       // now
    std::uint64_t memory_peak_bytes = 0;  // since the last reset
    bool peak_resettable = false;         // cgroup v1, or v2 with a writable memory.peak
};

std::string_view to_string(sandbox_state s) noexcept;

void to_json(nlohmann::json& j, const kernel_endpoints& e);  // without the key
void to_json(nlohmann::json& j, const sandbox_info& i);      // without the key
void to_json(nlohmann::json& j, const sandbox_status& s);

// The full record, key included, as the launcher persists it (root-only file)
// so that a restarted gateway can re-attach.
nlohmann::json to_persisted_json(const sandbox_info& i);
sandbox_info sandbox_info_from_json(const nlohmann::json& j);

}  // namespace cellgate::launcher
