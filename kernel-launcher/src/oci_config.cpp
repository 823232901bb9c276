#include "oci_config.hpp"

#include "relay_process.hpp"
#include "seccomp_profile.hpp"
#include "spec_validation.hpp"

#include <algorithm>

namespace cellgate::launcher {

using nlohmann::json;

namespace {

json mount(const std::string& destination, const std::string& type, const std::string& source,
           std::vector<std::string> options) {
    return {{"destination", destination}, {"type", type}, {"source", source}, {"options", options}};
}

json mounts(const oci_inputs& in) {
    const std::string tmp_size = "size=" + std::to_string(in.limits.tmp_bytes);
    auto all = json::array({
        mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
        mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
        mount("/dev/pts", "devpts", "devpts",
              {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
        mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=67108864"}),
        mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
        mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
        mount("/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "noexec", "mode=1777", tmp_size}),
        // The workspace executes what is built there (a compiled program, a
        // wheel's or an R package's shared objects): code that runs in the
        // sandbox can do as much without a file, so noexec kept out nothing
        // the sandbox's own bounds (user namespace, no capabilities,
        // nosuid, seccomp) do not.
        mount("/workspace", "bind", in.workspace_dir, {"rbind", "rw", "nosuid", "nodev"}),
        mount("/run/kernel", "bind", in.kernel_dir, {"rbind", "rw", "nosuid", "nodev", "noexec"}),
    });
    // The egress proxy's socket (a directory, so a restarted gateway's new
    // socket is seen). Read-only: connecting to a socket needs no write
    // access to its file system.
    if (!in.egress_dir.empty())
        all.push_back(mount("/run/egress", "bind", in.egress_dir, {"rbind", "ro", "nosuid", "nodev", "noexec"}));
    // Named volumes: one recursive bind of a root-owned dir whose entries are
    // the volumes' own mounts (their read-only flag is theirs).
    if (!in.volumes_dir.empty())
        all.push_back(mount("/volumes", "bind", in.volumes_dir, {"rbind", "rw", "nosuid", "nodev", "noexec"}));
    // /mnt is empty in every Debian rootfs, so nothing is created in the
    // shared image to mount the relay there.
    if (in.gvisor)
        all.push_back(mount(sandbox_relay_mount, "bind", in.gvisor->relay_script_dir,
                            {"rbind", "ro", "nosuid", "nodev", "noexec"}));
    return all;
}

json resources(const sandbox_limits& l, bool gvisor) {
    constexpr std::int64_t cpu_period_us = 100000;
    return {
        {"devices", json::array({{{"allow", false}, {"access", "rwm"}}})},
        // swap equal to the limit: memory+swap may not exceed memory, i.e. no swap.
        {"memory",
         {{"limit", l.memory_bytes}, {"swap", l.memory_bytes}, {"disableOOMKiller", false}}},
        {"pids", {{"limit", gvisor ? gvisor_host_pids(l.pids) : l.pids}}},
        {"cpu",
         {{"shares", l.cpu_shares},
          {"period", cpu_period_us},
          {"quota", static_cast<std::int64_t>(l.cpu_millis) * cpu_period_us / 1000}}},
    };
}

json rlimits(const sandbox_limits& l, bool gvisor) {
    const auto fsize = effective_fsize(l);
    auto out = json::array({
        {{"type", "RLIMIT_NOFILE"}, {"hard", l.nofile}, {"soft", l.nofile}},
        {{"type", "RLIMIT_FSIZE"}, {"hard", fsize}, {"soft", fsize}},
        {{"type", "RLIMIT_CORE"}, {"hard", 0}, {"soft", 0}},
    });
    // Under gVisor the guest's tasks are not host tasks: the sentry counts
    // them against RLIMIT_NPROC (per uid, and the kernel's uid is the only one
    // in the sandbox) and fork fails with EAGAIN at the limit, as the pids
    // cgroup does under runc. The host cgroup cannot do it: its tasks are the
    // sentry's threads, and exhausting them ends the whole sandbox.
    if (gvisor) out.push_back({{"type", "RLIMIT_NPROC"}, {"hard", l.pids}, {"soft", l.pids}});
    return out;
}

}  // namespace

std::vector<std::string> base_environment(const sandbox_limits& limits) {
    // BLAS and OpenMP pools sized to the CPU quota, not to the host's cores.
    const auto threads = std::to_string(std::max<std::uint32_t>(1, (limits.cpu_millis + 999) / 1000));
    return {"PATH=/usr/local/bin:/usr/bin:/bin",
            "HOME=/tmp",
            "LANG=C.UTF-8",
            "PYTHONUNBUFFERED=1",
            "PYTHONDONTWRITEBYTECODE=1",
            "OPENBLAS_NUM_THREADS=" + threads,
            "OMP_NUM_THREADS=" + threads,
            "MKL_NUM_THREADS=" + threads};
}

void set_environment(std::vector<std::string>& env, const std::map<std::string, std::string>& names) {
    for (const auto& [name, value] : names) {
        const auto prefix = name + "=";
        const auto it = std::find_if(env.begin(), env.end(), [&](const std::string& e) { return e.starts_with(prefix); });
        if (it != env.end()) *it = prefix + value;
        else env.push_back(prefix + value);
    }
}

json build_exec_process(const json& sandbox_process, const exec_spec& spec, const std::vector<std::string>& base_env) {
    json p = sandbox_process;
    p["args"] = spec.argv;
    p["cwd"] = spec.cwd;
    p["terminal"] = spec.tty;
    if (spec.tty)
        p["consoleSize"] = {{"height", spec.rows}, {"width", spec.cols}};
    else
        p.erase("consoleSize");
    std::vector<std::string> env = base_env;
    auto set = [&env](const std::string& name, const std::string& value) {
        const auto prefix = name + "=";
        const auto it = std::find_if(env.begin(), env.end(), [&](const std::string& e) { return e.starts_with(prefix); });
        if (it != env.end()) *it = prefix + value;
        else env.push_back(prefix + value);
    };
    if (spec.tty && spec.env.count("TERM") == 0) set("TERM", "xterm-256color");
    for (const auto& [name, value] : spec.env) set(name, value);
    p["env"] = env;
    return p;
}

std::vector<std::string> kernel_args() {
    return {"/usr/bin/tini", "-g", "--", "/opt/cellgate/cellgate-kernel", "-f",
            sandbox_connection_file};
}

std::vector<std::string> zygote_sandbox_args() { return {"/usr/bin/tini", "--", "/bin/sleep", "infinity"}; }

std::vector<std::string> relayed_kernel_args() {
    return {"/usr/bin/tini", "-g", "--", "/usr/bin/python3", "-I", "-S", sandbox_relay_script, "--",
            "/opt/cellgate/cellgate-kernel", "-f", sandbox_connection_file};
}

std::uint32_t gvisor_host_pids(std::uint32_t guest_pids) {
    // Measured with runsc 20221219 on the ptrace platform (2 cores): an idle
    // kernel's sandbox is about 80 host tasks (gofer, sentry, stubs), and each
    // guest process adds a stub process with a thread for every sentry thread
    // that runs it, about 9 more. The margin keeps fork's EAGAIN (from
    // RLIMIT_NPROC) ahead of the host limit, whose exhaustion would panic the
    // sentry and end the sandbox.
    const std::uint64_t host = 256 + 16ull * guest_pids;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(host, 4u << 20));
}

json build_oci_config(const oci_inputs& in) {
    const json no_caps = json::array();
    const json id_map = json::array({{{"containerID", 0}, {"hostID", in.host_id_base}, {"size", 65536}}});
    return {
        {"ociVersion", "1.0.2"},
        {"process",
         {{"terminal", false},
          {"user", {{"uid", in.uid}, {"gid", in.gid}, {"additionalGids", json::array()}, {"umask", 18}}},
          {"args", in.args},
          {"env", in.env},
          {"cwd", "/workspace"},
          {"capabilities",
           {{"bounding", no_caps},
            {"effective", no_caps},
            {"inheritable", no_caps},
            {"permitted", no_caps},
            {"ambient", no_caps}}},
          {"rlimits", rlimits(in.limits, in.gvisor.has_value())},
          {"noNewPrivileges", true},
          {"oomScoreAdj", 800}}},
        {"root", {{"path", in.rootfs}, {"readonly", true}}},
        {"hostname", "cellgate"},
        {"mounts", mounts(in)},
        {"linux",
         {{"uidMappings", id_map},
          {"gidMappings", id_map},
          {"namespaces", json::array({{{"type", "pid"}},
                                      {{"type", "network"}},
                                      {{"type", "ipc"}},
                                      {{"type", "uts"}},
                                      {{"type", "mount"}},
                                      {{"type", "user"}},
                                      {{"type", "cgroup"}}})},
          {"cgroupsPath", in.cgroups_path},
          {"resources", resources(in.limits, in.gvisor.has_value())},
          {"seccomp", in.gvisor ? gvisor_seccomp_profile() : default_seccomp_profile()},
          {"maskedPaths",
           json::array({"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                        "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                        "/proc/sched_debug", "/proc/scsi", "/proc/kallsyms", "/sys/firmware",
                        "/sys/devices/virtual/powercap", "/sys/kernel/debug",
                        "/sys/kernel/security"})},
          {"readonlyPaths",
           json::array({"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"})}}},
    };
}

}  // namespace cellgate::launcher
