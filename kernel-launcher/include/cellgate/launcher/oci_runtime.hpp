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

// An OCI runtime, driven through its command line. runc implements it;
// gVisor's runsc will implement the same interface.
class oci_runtime {
public:
    virtual ~oci_runtime() = default;
    virtual std::string_view name() const = 0;

    // Creates and starts the container from `bundle` (which holds config.json)
    // and returns once its init runs. The init's stdout and stderr go to
    // `log_fd`. Returns the init's host pid. Throws launch_error.
    virtual std::int64_t run(const std::string& id, const std::filesystem::path& bundle,
                             int log_fd) = 0;
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

}  // namespace cellgate::launcher
