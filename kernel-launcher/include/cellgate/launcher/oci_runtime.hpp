#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
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

// The descriptors a container's init gets.
struct container_stdio {
    int stdin_fd = -1;   // -1: /dev/null
    int stdout_fd = -1;  // -1: log_fd
    int log_fd = -1;     // stderr (and stdout unless stdout_fd is given)
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

// An OCI runtime, driven through its command line: runc, or gVisor's runsc.
class oci_runtime {
public:
    virtual ~oci_runtime() = default;
    virtual std::string_view name() const = 0;
    virtual runtime_traits traits() const { return {}; }
    // Why this runtime cannot run sandboxes on this machine (not installed,
    // say); empty when it can.
    virtual std::string unavailable_reason() const = 0;

    // Creates and starts the container from `bundle` (which holds config.json)
    // and returns once its init runs. Returns the host pid to watch: the
    // init's, or the sandbox's when traits().signals_through_runtime. Throws
    // launch_error.
    virtual std::int64_t run(const std::string& id, const std::filesystem::path& bundle,
                             const container_stdio& io) = 0;
    virtual void kill(const std::string& id, int signal, bool all_processes) = 0;
    // Deletes the container whatever its state; a missing container is not an error.
    virtual void remove(const std::string& id) = 0;
    // Empty status when the runtime does not know the container.
    virtual runtime_container state(const std::string& id) = 0;
    virtual std::vector<runtime_container> list() = 0;
};

// `runc --root <state_root> …`
std::unique_ptr<oci_runtime> make_runc_runtime(std::string runc_path,
                                               std::filesystem::path state_root);

// `runsc --root <state_root> --platform <platform> --network=none --oci-seccomp …`
std::unique_ptr<oci_runtime> make_runsc_runtime(std::string runsc_path, std::filesystem::path state_root,
                                                std::string platform);

// The absolute path of `program` (as given when it holds a '/', else looked
// up in PATH), or "" when there is no such executable.
std::string find_executable(const std::string& program);

}  // namespace cellgate::launcher
