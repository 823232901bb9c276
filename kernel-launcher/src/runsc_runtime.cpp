// gVisor's runsc as an OCI runtime. The container runs on gVisor's own kernel
// (the sentry, a host process with a narrow seccomp filter), so a kernel
// exploit inside has to get through the sentry before it meets the host's.
//
// What differs from runc, and why:
// - --network=none: the sandbox gets loopback only, like runc's empty network
//   namespace; --host-uds=none and --host-fifo=none keep host sockets and
//   fifos out of reach through the bind mounts.
// - --oci-seccomp: runsc ignores the OCI seccomp profile unless told; with it
//   the same profile filters the kernel's system calls inside the sentry.
// - The kernel's unix sockets never reach the host (the sentry keeps them), so
//   the launcher relays them over the container's stdin and stdout
//   (traits().relays_kernel_sockets, src/relay/relay_protocol.hpp).
// - The pid runsc reports is the sandbox's (the sentry), which lives exactly as
//   long as the container's init; signals for the kernel go through
//   `runsc kill`, which delivers them to the init inside.
// - --cpu-num-from-quota: the sandbox sees as many CPUs as its quota allows
//   (at least 2), so thread pools size themselves to the limit.
// - exec: the process runs in the sentry, not on the host. `runsc exec
//   --detach` leaves a waiter (runsc-exec) that exits with the process's code,
//   128 + n for signal n; signals go through `runsc kill --pid`. runsc
//   20221219 takes only args, env, cwd, user, capabilities and terminal from
//   process.json (rlimits and no_new_privs come from the sandbox itself) and
//   does not apply the OCI seccomp profile to an exec'd process (gVisor issue
//   12693, fixed upstream in 2026): see SECURITY.md.
#include "cli_runtime.hpp"
#include "command.hpp"
#include "runsc_platform.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <unistd.h>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

class runsc_runtime final : public cli_runtime {
public:
    runsc_runtime(std::string runsc_path, fs::path state_root, std::string platform,
                  std::function<void(const std::string&)> note)
        : cli_runtime(runsc_path, std::move(state_root)),
          requested_(platform),
          platform_({.runsc = std::move(runsc_path),
                     .requested = std::move(platform),
                     .cache_dir = "/run/cellgate/runsc-platform",
                     .probe_bound = std::chrono::seconds(5),
                     .device_check = {},
                     .note = std::move(note)}) {}

    std::string_view name() const override { return "runsc"; }
    std::string platform() const override { return platform_.platform(); }
    std::string platform_reason() const override { return platform_.reason(); }

    runtime_traits traits() const override { return {.relays_kernel_sockets = true, .signals_through_runtime = true}; }

    std::string unavailable_reason() const override {
        if (find_executable(program()).empty())
            return "gVisor's runsc is not installed (no executable '" + program() + "'; apt-get install runsc)";
        if (requested_ == "kvm" && ::access("/dev/kvm", R_OK | W_OK) != 0)
            return "runsc's kvm platform needs /dev/kvm, which is not usable here";
        if (requested_ != "auto" && requested_ != "ptrace" && requested_ != "kvm" && requested_ != "systrap")
            return "unknown runsc platform '" + requested_ + "'";
        return {};
    }

    std::int64_t run(const std::string& id, const fs::path& bundle, const container_start& io) override {
        return start(id, bundle, io, "run", {});
    }

    bool can_checkpoint() const override { return true; }

    // The sandbox stops once its state is written (no --leave-running).
    void checkpoint(const std::string& id, const fs::path& image_dir) override {
        run_verb("checkpoint", {"--log", (image_dir.parent_path() / "runsc-checkpoint.log").string(), "checkpoint",
                                "--image-path", image_dir.string(), id});
    }

    std::int64_t restore(const std::string& id, const fs::path& bundle, const fs::path& image_dir,
                         const container_start& io) override {
        return start(id, bundle, io, "restore", {"--image-path", image_dir.string()});
    }

    exec_command exec_command_for(const std::string& id, const exec_files& files) const override {
        const auto internal_pid_file = (files.dir / "exec.internal-pid").string();
        auto c = detached_exec(id, files, sandbox_flags(), {"--internal-pid-file", internal_pid_file});
        c.internal_pid_file = internal_pid_file;
        c.signal_command = {program(), "--root", root().string(), "kill", "--pid", "{pid}", id, "{signal}"};
        c.status_is_exit_code = true;
        return c;
    }

private:
    std::int64_t start(const std::string& id, const fs::path& bundle, const container_start& io,
                       const std::string& verb, const std::vector<std::string>& verb_flags) {
        // runsc's own log goes to a file: by default it would go to stdout,
        // which here is the relay's pipe.
        const auto log = bundle / "runsc.log";
        auto flags = sandbox_flags();
        // A sandbox with an egress path may connect to the host sockets
        // among its mounts (only the proxy's: nothing else mounted holds a
        // host socket); it may never create one.
        if (has_egress_mount(bundle))
            for (auto& f : flags)
                if (f == "--host-uds=none") f = "--host-uds=open";
        flags.push_back("--log");
        flags.push_back(log.string());
        return run_detached(id, bundle, io, flags, log, 1024, verb, verb_flags);
    }

    static bool has_egress_mount(const fs::path& bundle) {
        std::ifstream in(bundle / "config.json");
        const auto config = nlohmann::json::parse(in, nullptr, false);
        if (!config.is_object() || !config.contains("mounts") || !config["mounts"].is_array()) return false;
        for (const auto& m : config["mounts"])
            if (m.is_object() && m.value("destination", "") == "/run/egress") return true;
        return false;
    }

    // The flags the sandbox was made with; exec passes them too, so that
    // whatever runsc reads from its configuration there is the same.
    std::vector<std::string> sandbox_flags() const {
        return {"--platform", platform_.platform(), "--network=none", "--host-uds=none", "--host-fifo=none", "--oci-seccomp",
                "--cpu-num-from-quota"};
    }

    std::string requested_;
    runsc_platform platform_;  // "auto": ptrace until kvm is proven (runsc_platform.hpp)
};

}  // namespace

std::string resolve_runsc_platform(const std::string& requested, std::string* why, const fs::path& kvm_device) {
    if (requested != "auto") {
        if (why) *why = "as configured";
        return requested;
    }
    const auto say = [why](std::string text) {
        if (why) *why = std::move(text);
    };
    const int fd = ::open(kvm_device.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        say(kvm_device.string() + " cannot be opened: " + std::strerror(errno));
        return "ptrace";
    }
    std::string platform = "ptrace";
    if (const int v = ::ioctl(fd, KVM_GET_API_VERSION, 0); v != KVM_API_VERSION) {
        say(kvm_device.string() + " answers KVM_GET_API_VERSION with " + std::to_string(v));
    } else if (const int vm = ::ioctl(fd, KVM_CREATE_VM, 0); vm < 0) {
        say(kvm_device.string() + " refuses KVM_CREATE_VM: " + std::strerror(errno));
    } else {
        ::close(vm);
        say(kvm_device.string() + " makes virtual machines");
        platform = "kvm";
    }
    ::close(fd);
    return platform;
}

std::unique_ptr<oci_runtime> make_runsc_runtime(std::string runsc_path, fs::path state_root, std::string platform,
                                                std::function<void(const std::string&)> note) {
    return std::make_unique<runsc_runtime>(std::move(runsc_path), std::move(state_root), std::move(platform),
                                           std::move(note));
}

}  // namespace cellgate::launcher
