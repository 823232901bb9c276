#pragma once

#include "cellgate/launcher/sandbox_spec.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace cellgate::launcher {

// Where the launcher keeps things and what it accepts. Defaults suit a root
// install on one machine; tests point the directories elsewhere.
struct launcher_config {
    std::filesystem::path state_dir = "/run/cellgate";                 // run dirs, runc state, slots
    std::filesystem::path image_store = "/var/cache/cellgate/images";  // images/build.sh output
    std::filesystem::path workspace_root = "/var/lib/cellgate/workspaces";
    // Where egress proxy sockets live (sandbox_spec::egress_dir); empty: no
    // sandbox may have one.
    std::filesystem::path egress_root;
    std::string runc_path = "runc";
    // gVisor: `spec.runtime = "runsc"`. ptrace needs no /dev/kvm; kvm is faster
    // where /dev/kvm works (bare metal, or nested virtualisation). "auto":
    // ptrace until a bounded background probe proves kvm (never delays a start).
    std::string runsc_path = "runsc";
    std::string runsc_platform = "auto";
    // Told, in a sentence, what the launcher decides on its own after start
    // (runsc's platform and why), for the log. May be called from another thread.
    std::function<void(const std::string&)> note;
    // Memory merging (runc sandboxes; docs/memory.md): each kernel opts into
    // KSM (PR_SET_MEMORY_MERGE) and starts with a fixed address layout
    // (ADDR_NO_RANDOMIZE) and string hash seed (PYTHONHASHSEED=0), so the
    // pages its imports fill are the same bytes in every kernel and ksmd can
    // share them. The host must run ksmd (scripts/ksm.sh on). Off: sessions
    // that merge can learn, by timing a write, whether another session holds
    // a page of given content.
    bool memory_merge = false;
    // The kernel zygote (runc sandboxes; docs/memory.md): one pre-imported
    // Python per image forks each new kernel into its sandbox, so a start
    // skips the imports and the kernels share the imports' pages. Kernels
    // forked from one zygote share its string hash seed.
    bool zygote = false;
    // The host half of the gVisor relay; empty: next to the running program,
    // else in PATH.
    std::string relay_path;
    // The supervisor of exec'd processes (cellgate-exec-shim); empty: next to
    // the running program, else in PATH.
    std::string exec_shim_path;
    // Processes run through exec() at once: per sandbox and in all (this
    // launcher's; a launcher service has one). Beyond them exec() refuses.
    std::uint32_t max_execs_per_sandbox = 16;
    std::uint32_t max_execs = 128;

    // Each workspace gets its own host uid/gid range of 65536 ids from here on,
    // so no two sessions share a host uid even if one escaped its mounts.
    // Per node (node_settings.hpp): two instances on one host need disjoint
    // ranges and their own cgroup parents.
    std::uint32_t host_id_base = 1000000;
    std::uint32_t max_slots = 4096;
    // Sandboxes' cgroups go under /<cgroup_parent>/<id>; start-up reaping looks
    // only there.
    std::string cgroup_parent = "cellgate";
    // Checked at start-up: the id range must not overlap these.
    std::vector<std::filesystem::path> subid_files = {"/etc/subuid", "/etc/subgid"};

    // Environment names a caller may set. A trailing '*' matches a prefix.
    std::vector<std::string> env_allow = {
        "KERNEL_*", "LANG", "LC_*", "TZ", "PYTHONHASHSEED", "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_MAX_THREADS", "MPLBACKEND"};

    // What a spec may ask for at most; beyond these a request is refused.
    sandbox_limits max_limits = {
        .memory_bytes = 64ull << 30,
        .pids = 32768,
        .cpu_millis = 64000,
        .workspace_bytes = 1ull << 40,
        .tmp_bytes = 16ull << 30,
        .nofile = 1u << 20,
        .fsize_bytes = 1ull << 40,
    };
    std::uint64_t run_dir_bytes = 4u << 20;  // per-sandbox tmpfs: sockets, config, kernel log
};

}  // namespace cellgate::launcher
