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
#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/oci_runtime.hpp"
#include "command.hpp"
#include "host_fs.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstring>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

constexpr auto runtime_timeout = std::chrono::seconds(60);

std::string signal_name(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
}

class runsc_runtime final : public oci_runtime {
public:
    runsc_runtime(std::string runsc_path, fs::path state_root, std::string platform)
        : runsc_(std::move(runsc_path)), root_(std::move(state_root)), platform_(std::move(platform)) {}

    std::string_view name() const override { return "runsc"; }

    runtime_traits traits() const override { return {.relays_kernel_sockets = true, .signals_through_runtime = true}; }

    std::string unavailable_reason() const override {
        if (find_executable(runsc_).empty())
            return "gVisor's runsc is not installed (no executable '" + runsc_ + "'; apt-get install runsc)";
        if (platform_ == "kvm" && ::access("/dev/kvm", R_OK | W_OK) != 0)
            return "runsc's kvm platform needs /dev/kvm, which is not usable here";
        if (platform_ != "ptrace" && platform_ != "kvm" && platform_ != "systrap")
            return "unknown runsc platform '" + platform_ + "'";
        return {};
    }

    std::int64_t run(const std::string& id, const fs::path& bundle, const container_stdio& io) override {
        const auto pid_file = bundle / "init.pid";
        const auto log = bundle / "runsc.log";
        // runsc's own log goes to a file: by default it would go to stdout,
        // which here is the relay's pipe.
        std::vector<std::string> args = {runsc_,
                                          "--root", root_.string(),
                                          "--platform", platform_,
                                          "--network=none",
                                          "--host-uds=none",
                                          "--host-fifo=none",
                                          "--oci-seccomp",
                                          "--cpu-num-from-quota",
                                          "--log", log.string(),
                                          "run", "--detach", "--bundle", bundle.string(),
                                          "--pid-file", pid_file.string(), id};
        command_fds fds;
        fds.stdin_fd = io.stdin_fd;
        fds.stdout_fd = io.stdout_fd;
        fds.stderr_fd = io.log_fd;
        const auto r = run_command(args, runtime_timeout, fds);
        if (r.timed_out) throw launch_error("runtime-run", "runsc run timed out", ETIMEDOUT);
        if (r.exit_code != 0)
            throw launch_error("runtime-run", "runsc run exited " + std::to_string(r.exit_code) + ": " +
                                                  read_tail(log, 1024) + read_tail(bundle / "kernel.log", 1024));
        try {
            return std::stoll(read_file(pid_file, 32));
        } catch (...) {
            throw launch_error("runtime-run", "runsc wrote no pid file", ENOENT);
        }
    }

    void kill(const std::string& id, int signal, bool all_processes) override {
        std::vector<std::string> args = {"kill"};
        if (all_processes) args.push_back("--all");
        args.push_back(id);
        args.push_back(signal_name(signal));
        const auto r = run_command(argv(args), runtime_timeout);
        if (r.exit_code != 0 && !not_found(r.output) && r.output.find("not running") == std::string::npos)
            throw launch_error("runtime-kill", "runsc kill: " + r.output);
    }

    void remove(const std::string& id) override {
        const auto r = run_command(argv({"delete", "--force", id}), runtime_timeout);
        if (r.exit_code != 0 && !not_found(r.output))
            throw launch_error("runtime-delete", "runsc delete: " + r.output);
    }

    runtime_container state(const std::string& id) override {
        const auto r = run_command(argv({"state", id}), runtime_timeout);
        if (r.exit_code != 0) return {id, "", 0, ""};
        return parse(nlohmann::json::parse(r.output, nullptr, false), id);
    }

    std::vector<runtime_container> list() override {
        std::vector<runtime_container> out;
        std::error_code ec;
        if (!fs::is_directory(root_, ec)) return out;  // never used: nothing to ask runsc
        const auto r = run_command(argv({"list", "--format", "json"}), runtime_timeout);
        if (r.exit_code != 0) return out;
        const auto j = nlohmann::json::parse(r.output, nullptr, false);
        if (!j.is_array()) return out;  // "null" when there are none
        for (const auto& c : j) out.push_back(parse(c, ""));
        return out;
    }

private:
    std::vector<std::string> argv(std::vector<std::string> args) const {
        std::vector<std::string> out = {runsc_, "--root", root_.string()};
        out.insert(out.end(), args.begin(), args.end());
        return out;
    }

    static bool not_found(const std::string& output) {
        return output.find("does not exist") != std::string::npos ||
               output.find("not found") != std::string::npos;
    }

    static runtime_container parse(const nlohmann::json& j, const std::string& fallback_id) {
        runtime_container c;
        c.id = fallback_id;
        if (!j.is_object()) return c;
        c.id = j.value("id", fallback_id);
        c.status = j.value("status", std::string());
        c.pid = std::max<std::int64_t>(0, j.value("pid", std::int64_t{0}));  // -1 once stopped
        c.bundle = j.value("bundle", std::string());
        return c;
    }

    std::string runsc_;
    fs::path root_;
    std::string platform_;
};

}  // namespace

std::unique_ptr<oci_runtime> make_runsc_runtime(std::string runsc_path, fs::path state_root, std::string platform) {
    return std::make_unique<runsc_runtime>(std::move(runsc_path), std::move(state_root), std::move(platform));
}

}  // namespace cellgate::launcher
