#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::launcher {

struct runtime_container {
    std::string id;
    std::string status;  // "creating", "created", "running", "paused", "stopped"
    std::int64_t pid = 0;
    std::string bundle;
};

// What a container's start gets: its init's descriptors, and the sandbox
// start's deadline, past which the runtime's command is killed (a runtime
// hung on its platform must not hold the start past the time it was given).
struct container_start {
    int stdin_fd = -1;   // -1: /dev/null
    int stdout_fd = -1;  // -1: log_fd
    int log_fd = -1;     // stderr (and stdout unless stdout_fd is given)
    // Unset: the runtime's own bound (a minute) alone.
    std::optional<std::chrono::steady_clock::time_point> deadline;
};

// How the launcher must treat a runtime's containers.
struct runtime_traits {
    // The kernel's unix sockets stay inside the sandbox (gVisor keeps them in
    // its own kernel), so the launcher relays them over the container's stdin
    // and stdout; see src/relay/relay_protocol.hpp.
    bool relays_kernel_sockets = false;
    // The pid the runtime reports is not the container's init but the
    // sandbox's (gVisor's sentry): signals go through the runtime.
    bool signals_through_runtime = false;
};

// Where an exec's files are: the OCI process to run, the exec's own
// directory (root-only) for the runtime's pid files and log, and the socket
// the runtime sends a PTY master to (empty without a tty).
struct exec_files {
    std::filesystem::path process_json;
    std::filesystem::path dir;
    std::filesystem::path console_socket;
};

// How cellgate-exec-shim runs a process in a running container and then
// watches it: `start` returns once the process runs (detached) and has
// written `pid_file`, the host process to wait for. That is the process itself
// (runc: the shim, a subreaper, inherits it and reads its exact wait status),
// or the runtime's waiter for it (runsc: it exits with the process's code, and
// with 128 + n for signal n). Signals go to the host pid's process group, or,
// when `signal_command` is set, through that argv with "{pid}" replaced by the
// pid in `internal_pid_file` and "{signal}" by the signal's number.
struct exec_command {
    std::vector<std::string> start;
    std::string pid_file;
    std::string internal_pid_file;
    std::vector<std::string> signal_command;
    bool status_is_exit_code = false;
    std::string log;  // the runtime's own log, quoted when `start` fails
};

// An OCI runtime, driven through its command line: runc, or gVisor's runsc.
class oci_runtime {
public:
    virtual ~oci_runtime() = default;
    virtual std::string_view name() const = 0;
    virtual runtime_traits traits() const { return {}; }
    // Why this runtime cannot run sandboxes on this machine (not installed,
    // say); empty when it can.
    virtual std::string unavailable_reason() const = 0;
    // What the runtime runs sandboxes on, when it has a choice (runsc's
    // platform: "kvm" or "ptrace"); empty otherwise.
    virtual std::string platform() const { return {}; }
    // Why that platform (a sentence for the log and /metrics).
    virtual std::string platform_reason() const { return {}; }

    // Creates and starts the container from `bundle` (which holds config.json)
    // and returns once its init runs. Returns the host pid to watch: the
    // init's, or the sandbox's when traits().signals_through_runtime. Throws
    // launch_error.
    virtual std::int64_t run(const std::string& id, const std::filesystem::path& bundle,
                             const container_start& io) = 0;
    virtual void kill(const std::string& id, int signal, bool all_processes) = 0;
    // Deletes the container whatever its state; a missing container is not an error.
    virtual void remove(const std::string& id) = 0;
    // Empty status when the runtime does not know the container.
    virtual runtime_container state(const std::string& id) = 0;
    virtual std::vector<runtime_container> list() = 0;
    // Whether the runtime can save a running container's memory to disk and
    // start it again from there (gVisor can; runc would need CRIU).
    virtual bool can_checkpoint() const { return false; }
    // Saves container `id` (every process, its memory, its in-sandbox file
    // systems) into `image_dir` and stops it. Throws launch_error("checkpoint").
    virtual void checkpoint(const std::string& id, const std::filesystem::path& image_dir);
    // Starts container `id` again from `bundle` (the config.json it ran with)
    // and the state in `image_dir`, as run() starts one, on new stdio; returns
    // what run() returns. Throws launch_error("runtime-run").
    virtual std::int64_t restore(const std::string& id, const std::filesystem::path& bundle,
                                 const std::filesystem::path& image_dir, const container_start& io);
    // The commands that run `files.process_json` in running container `id`.
    virtual exec_command exec_command_for(const std::string& id, const exec_files& files) const = 0;
};

// `runc --root <state_root> …`; with `fixed_layout`, sandboxes start with
// ADDR_NO_RANDOMIZE (launcher_config::memory_merge).
std::unique_ptr<oci_runtime> make_runc_runtime(std::string runc_path, std::filesystem::path state_root,
                                               bool fixed_layout = false);

// `runsc --root <state_root> --platform <platform> --network=none --oci-seccomp …`
// runsc's platform for `requested`: "auto" is "kvm" where /dev/kvm (or
// `kvm_device`) opens and answers KVM_GET_API_VERSION and KVM_CREATE_VM,
// else "ptrace"; anything else is returned as given. `why` says how "auto"
// chose.
std::string resolve_runsc_platform(const std::string& requested, std::string* why = nullptr,
                                   const std::filesystem::path& kvm_device = "/dev/kvm");
// "auto" starts on ptrace and moves new sandboxes to kvm once a background
// probe proves it (src/runsc_platform.hpp); `note` hears each verdict.
std::unique_ptr<oci_runtime> make_runsc_runtime(std::string runsc_path, std::filesystem::path state_root,
                                                std::string platform,
                                                std::function<void(const std::string&)> note = {});

// The absolute path of `program` (as given when it holds a '/', else looked
// up in PATH), or "" when there is no such executable.
std::string find_executable(const std::string& program);

}  // namespace cellgate::launcher
