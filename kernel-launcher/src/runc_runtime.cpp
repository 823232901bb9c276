// runc as an OCI runtime: the verbs are cli_runtime's; runc needs no flags
// of its own.
#include "cli_runtime.hpp"

#include <sys/personality.h>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

// The calling thread's personality with ADDR_NO_RANDOMIZE for as long as it
// lives. runc is spawned from this thread and inherits it, and so, through
// runc init's exec, does the container's process (runc 1.1 has no
// linux.personality; the sandbox's seccomp profile refuses personality(2)).
// It is a thread's attribute, read only at exec: the launcher's own memory
// layout does not change.
class fixed_layout_for_children {
public:
    explicit fixed_layout_for_children(bool on) : old_(on ? ::personality(0xffffffff) : -1) {
        if (old_ >= 0) ::personality(static_cast<unsigned long>(old_) | ADDR_NO_RANDOMIZE);
    }
    ~fixed_layout_for_children() {
        if (old_ >= 0) ::personality(static_cast<unsigned long>(old_));
    }
    fixed_layout_for_children(const fixed_layout_for_children&) = delete;
    fixed_layout_for_children& operator=(const fixed_layout_for_children&) = delete;

private:
    int old_;
};

class runc_runtime final : public cli_runtime {
public:
    runc_runtime(std::string runc_path, fs::path state_root, bool fixed_layout)
        : cli_runtime(std::move(runc_path), std::move(state_root)), fixed_layout_(fixed_layout) {}

    std::string_view name() const override { return "runc"; }

    std::string unavailable_reason() const override {
        if (find_executable(program()).empty()) return "runc is not installed (no executable '" + program() + "')";
        return {};
    }

    std::int64_t run(const std::string& id, const fs::path& bundle, const container_start& io) override {
        const fixed_layout_for_children layout(fixed_layout_);
        return run_detached(id, bundle, io, {}, bundle / "kernel.log", 2048);
    }

    // runc applies the container's seccomp profile (and its namespaces,
    // cgroup and mount setup) to an exec'd process by itself; the rest comes
    // from process.json. Detached, the process is left to the nearest
    // subreaper, the exec shim, which signals its group and reads its status.
    exec_command exec_command_for(const std::string& id, const exec_files& files) const override {
        return detached_exec(id, files, {}, {});
    }

private:
    bool fixed_layout_;
};

}  // namespace

std::unique_ptr<oci_runtime> make_runc_runtime(std::string runc_path, fs::path state_root, bool fixed_layout) {
    return std::make_unique<runc_runtime>(std::move(runc_path), std::move(state_root), fixed_layout);
}

}  // namespace cellgate::launcher
