// runc as an OCI runtime: the verbs are cli_runtime's; runc needs no flags
// of its own.
#include "cli_runtime.hpp"

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

class runc_runtime final : public cli_runtime {
public:
    runc_runtime(std::string runc_path, fs::path state_root) : cli_runtime(std::move(runc_path), std::move(state_root)) {}

    std::string_view name() const override { return "runc"; }

    std::string unavailable_reason() const override {
        if (find_executable(program()).empty()) return "runc is not installed (no executable '" + program() + "')";
        return {};
    }

    std::int64_t run(const std::string& id, const fs::path& bundle, const container_stdio& io) override {
        return run_detached(id, bundle, io, {}, bundle / "kernel.log", 2048);
    }

    // runc applies the container's seccomp profile (and its namespaces,
    // cgroup and mount setup) to an exec'd process by itself; the rest comes
    // from process.json. Detached, the process is left to the nearest
    // subreaper, the exec shim, which signals its group and reads its status.
    exec_command exec_command_for(const std::string& id, const exec_files& files) const override {
        return detached_exec(id, files, {}, {});
    }
};

}  // namespace

std::unique_ptr<oci_runtime> make_runc_runtime(std::string runc_path, fs::path state_root) {
    return std::make_unique<runc_runtime>(std::move(runc_path), std::move(state_root));
}

}  // namespace cellgate::launcher
