#pragma once

// What runc and runsc share: both are OCI runtime command lines with the same
// verbs (run --detach, kill, delete, state, list --format json) and the same
// JSON, under a --root state directory. A runtime says how it is invoked and
// what is its own (runsc's flags, its traits); the verbs are written once.

#include "cellgate/launcher/oci_runtime.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace cellgate::launcher {

class cli_runtime : public oci_runtime {
public:
    void kill(const std::string& id, int signal, bool all_processes) override;
    void remove(const std::string& id) override;
    runtime_container state(const std::string& id) override;
    std::vector<runtime_container> list() override;

protected:
    // `<program> --root <root> <flags…> --log <dir>/runtime.log exec --detach
    // --pid-file <dir>/exec.pid --process … [--console-socket …] <exec_flags…> <id>`:
    // the process detaches, and the pid file names the host process to wait for.
    exec_command detached_exec(const std::string& id, const exec_files& files, const std::vector<std::string>& flags,
                               const std::vector<std::string>& exec_flags) const;

    cli_runtime(std::string program, std::filesystem::path root)
        : program_(std::move(program)), root_(std::move(root)) {}

    // `<program> --root <root> <flags…> <verb> --detach --bundle … --pid-file …
    // <verb_flags…> <id>` (verb run, or restore); returns the pid the runtime
    // wrote. On failure the launch_error quotes `why` (the tail of the logs
    // that say what went wrong).
    std::int64_t run_detached(const std::string& id, const std::filesystem::path& bundle, const container_start& io,
                              const std::vector<std::string>& flags, const std::filesystem::path& why_log,
                              std::size_t why_bytes, const std::string& verb = "run",
                              const std::vector<std::string>& verb_flags = {});
    // `<program> --root <root> <flags…> <args…>`, within the runtime's time
    // limit; throws launch_error(step) quoting its output when it fails.
    void run_verb(const char* step, const std::vector<std::string>& args);

    const std::string& program() const noexcept { return program_; }
    const std::filesystem::path& root() const noexcept { return root_; }

private:
    std::vector<std::string> argv(std::vector<std::string> args) const;

    std::string program_;
    std::filesystem::path root_;
};

}  // namespace cellgate::launcher
