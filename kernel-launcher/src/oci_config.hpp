#pragma once

#include "cellgate/launcher/exec_spec.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::launcher {

// Everything the OCI config depends on, already decided. build_oci_config is a
// pure function of this, so it is tested against golden files.
struct oci_inputs {
    std::string id;
    std::string rootfs;          // host path of the read-only image rootfs
    std::string workspace_dir;   // host path, mounted at /workspace
    std::string kernel_dir;      // host path, mounted at /run/kernel
    std::string egress_dir;      // host path, mounted read-only at /run/egress; empty: none
    // Host dir holding the sandbox's named volumes (each a bind mount, read-
    // only where asked), mounted at /volumes; empty: none.
    std::string volumes_dir;
    std::uint32_t host_id_base = 0;  // container ids 0…65535 map to host_id_base…
    std::uint32_t uid = 1000;
    std::uint32_t gid = 1000;
    sandbox_limits limits;
    std::vector<std::string> args;  // the process argv
    std::vector<std::string> env;   // "NAME=value", already filtered
    std::string cgroups_path;       // "/cellgate/<id>"

    // gVisor (runsc) only. The kernel is relayed, and the pids limit moves
    // inside the sandbox: see build_oci_config.
    struct gvisor_inputs {
        std::string relay_script_dir;  // host dir with the sandbox side of the relay
    };
    std::optional<gvisor_inputs> gvisor;
};

nlohmann::json build_oci_config(const oci_inputs& in);

// The environment every kernel gets, before the caller's allow-listed names.
std::vector<std::string> base_environment(const sandbox_limits& limits);
// Sets each of `names` in `env` ("NAME=value" entries): replaced where present, else added.
void set_environment(std::vector<std::string>& env, const std::map<std::string, std::string>& names);

// The OCI process for an exec in a sandbox whose config.json has
// `sandbox_process`: that process (its user, capabilities, rlimits,
// noNewPrivileges, oomScoreAdj, and whatever else it sets) with the exec's
// argv, cwd, terminal and environment: `base_env`, then the exec's names over
// it, and TERM=xterm-256color under a tty unless the exec names TERM.
nlohmann::json build_exec_process(const nlohmann::json& sandbox_process, const exec_spec& spec,
                                  const std::vector<std::string>& base_env);

// The kernel's argv inside the sandbox: tini as init, forwarding signals to the
// kernel's process group, then the image's kernel entry point.
std::vector<std::string> kernel_args();
// The same under gVisor, with the relay between tini and the kernel.
std::vector<std::string> relayed_kernel_args();
// The process of a sandbox whose kernel the zygote forks in: tini (reaping
// orphans) over a sleep.
std::vector<std::string> zygote_sandbox_args();

// The host cgroup's pids limit for a gVisor sandbox whose kernel may have
// `guest_pids` tasks: the sentry's and gofer's threads and one ptrace stub
// process per guest address space count there, not the guest's tasks.
std::uint32_t gvisor_host_pids(std::uint32_t guest_pids);

inline constexpr const char* sandbox_connection_file = "/run/kernel/connection.json";

}  // namespace cellgate::launcher
