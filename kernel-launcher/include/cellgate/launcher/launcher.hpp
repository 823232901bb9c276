#pragma once

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/launcher_config.hpp"
#include "cellgate/launcher/oci_runtime.hpp"
#include "cellgate/launcher/sandbox_launcher.hpp"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace cellgate::launcher {

// Starts, signals, inspects and removes sandboxed kernels, in this process
// (which needs root). Thread-safe: each call works on its own sandbox's
// files; shared state is on disk, claimed with O_EXCL creates. Calls block
// (they run the OCI runtime), so an async caller runs them off its reactor.
class launcher final : public sandbox_launcher {
public:
    explicit launcher(launcher_config config);
    launcher(launcher_config config, std::map<std::string, std::unique_ptr<oci_runtime>> runtimes);
    ~launcher() override;

    // Validates the spec, builds the sandbox and waits until the kernel answers
    // kernel_info_request. On failure everything made so far is torn down and
    // a launch_error names the step. spec_error means nothing was started.
    sandbox_info launch(const sandbox_spec& spec) override;

    // Sends a signal to the sandbox's init (tini forwards it to the kernel's
    // process group): SIGINT interrupts a cell.
    void signal(const std::string& id, int signal) override;

    sandbox_status status(const std::string& id) override;

    // Changes a running sandbox's relative CPU weight (a warm-pool kernel is
    // prepared at a low weight and raised when a session claims it).
    void set_cpu_shares(const std::string& id, std::uint32_t shares) override;
    sandbox_usage usage(const std::string& id, bool reset_peak) override;
    std::vector<sandbox_status> list() override;

    // Kills the kernel and removes the container, its cgroups, its run dir,
    // its checkpoint if paused, and (unless kept) its workspace. Idempotent.
    void remove(const std::string& id, remove_options options = {}) override;

    // Removes what belongs to no live sandbox: containers without a run dir,
    // run dirs without a container, stopped sandboxes (unless in `keep`),
    // stray cgroups and workspace slots; with `unused_workspaces`, also
    // workspaces no sandbox mounts. Returns what it removed.
    std::vector<std::string> reap_orphans(const std::set<std::string>& keep = {},
                                          bool unused_workspaces = false) override;

    // Checks a spec without starting anything; throws spec_error.
    void validate(const sandbox_spec& spec) const override;

    // Through `runc exec` / `runsc exec` with a process built from the
    // sandbox's own (its user, capabilities, rlimits, no_new_privs), watched
    // by a cellgate-exec-shim. At most config().max_execs_per_sandbox per
    // sandbox and config().max_execs in all run through one launcher.
    exec_process exec(const std::string& id, const exec_spec& spec) override;

    checkpoint_info checkpoint(const std::string& id) override;
    sandbox_info restore(const std::string& id) override;
    snapshot_info snapshot_workspace(const std::string& id, const std::string& snapshot) override;
    void remove_snapshot(const std::string& snapshot) override;
    void create_volume(const std::string& volume, std::uint64_t bytes) override;
    volume_info volume_usage(const std::string& volume) override;
    void remove_volume(const std::string& volume) override;
    build_step_result run_build_step(const build_step_spec& spec) override;
    void remove_layer(const std::string& id) override;
    image_import_result import_image(const image_import_spec& spec) override;

    const launcher_config& config() const noexcept { return config_; }

private:
    struct impl;
    launcher_config config_;
    std::unique_ptr<impl> impl_;
};

}  // namespace cellgate::launcher
