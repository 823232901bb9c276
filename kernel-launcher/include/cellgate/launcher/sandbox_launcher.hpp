#pragma once

#include "cellgate/launcher/build_step.hpp"
#include "cellgate/launcher/exec_process.hpp"
#include "cellgate/launcher/exec_spec.hpp"
#include "cellgate/launcher/sandbox_info.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace cellgate::launcher {

struct remove_options {
    bool keep_workspace = false;  // a restart keeps the session's files
};

// What checkpoint() left on disk for restore().
struct checkpoint_info {
    bool memory = false;            // the kernel's memory was saved (the runtime checkpoints)
    std::uint64_t image_bytes = 0;  // the memory image's size on disk (besides the workspace)
    double ms = 0;                  // how long the checkpoint took
};

// What snapshot_workspace() kept.
struct snapshot_info {
    std::uint64_t bytes = 0;       // the workspace image's size (its cap)
    std::uint64_t disk_bytes = 0;  // the blocks the copy holds on disk (0 when it shares them: a reflink)
    bool reflinked = false;
    double ms = 0;                 // how long the sandbox's writes waited
};

// A named volume's size and what its files use of it.
struct volume_info {
    std::uint64_t bytes = 0, used_bytes = 0;
};

// What starts and stops sandboxes, as its users see it: the launcher in the
// caller's process (launcher.hpp, which needs root) and the client of the
// privileged launcher service (service.hpp, over a unix socket) both are one.
// Same calls, same errors (launch_error.hpp): a caller never knows which.
// Every call blocks; an async caller runs them off its reactor.
class sandbox_launcher {
public:
    virtual ~sandbox_launcher() = default;

    // Validates the spec, builds the sandbox and waits until the kernel
    // answers kernel_info_request; spec_error means nothing was started.
    virtual sandbox_info launch(const sandbox_spec& spec) = 0;
    // To the sandbox's init, which forwards it to the kernel's process group.
    virtual void signal(const std::string& id, int signal) = 0;
    virtual sandbox_status status(const std::string& id) = 0;
    virtual void set_cpu_shares(const std::string& id, std::uint32_t shares) = 0;
    // The sandbox's CPU time and memory peak; with `reset_peak` the peak
    // starts again from the current use (what a cell's record measures from).
    virtual sandbox_usage usage(const std::string& id, bool reset_peak) = 0;
    virtual std::vector<sandbox_status> list() = 0;
    // Idempotent.
    virtual void remove(const std::string& id, remove_options options = {}) = 0;
    // Removes what belongs to no live sandbox (and, with unused_workspaces,
    // workspaces none mounts), except `keep`; returns what it removed.
    virtual std::vector<std::string> reap_orphans(const std::set<std::string>& keep = {},
                                                  bool unused_workspaces = false) = 0;
    // Checks a spec without starting anything; throws spec_error.
    virtual void validate(const sandbox_spec& spec) const = 0;
    // Runs a process inside running sandbox `id` with the kernel's own
    // confinement and returns once it runs (exec_spec.hpp, exec_process.hpp).
    // It ends when it exits, when its handle is dropped, or with the sandbox.
    // spec_error: the spec is wrong. launch_error: no such running sandbox
    // (ESRCH), too many processes already (step "exec-limit", EAGAIN), or the
    // runtime could not start it (argv[0] not found, no such cwd, …).
    virtual exec_process exec(const std::string& id, const exec_spec& spec) = 0;
    // Stops running sandbox `id` and keeps what a later start needs: its
    // workspace (mounted, as after remove with keep_workspace) and, where the
    // runtime can checkpoint (runsc), its memory and every process in it, in
    // <state dir>/paused/<id>/ with its records. Processes run through exec()
    // are ended first. launch_error: no such running sandbox (ESRCH), or the
    // runtime failed to checkpoint (the sandbox is then removed, its
    // workspace kept).
    virtual checkpoint_info checkpoint(const std::string& id) = 0;
    // Starts sandbox `id` again from its memory image (checkpoint() with
    // memory): the same kernel, key and endpoints, continuing where it was,
    // on new pipes and a new host relay. The image is removed once it runs.
    // launch_error: no image for `id` (ENOENT), or the runtime refused it
    // (a corrupt image: the image stays for inspection until remove()).
    virtual sandbox_info restore(const std::string& id) = 0;
    // Keeps a copy of sandbox `id`'s workspace as snapshot `snapshot` (a
    // name like an id) in <state dir>/snapshots/, consistent while the
    // sandbox runs on (its writes wait for the copy). A launch with
    // spec.from_snapshot starts its new workspace as a copy of it.
    // launch_error: no workspace for `id` (ENOENT), or `snapshot` exists
    // already (EEXIST).
    virtual snapshot_info snapshot_workspace(const std::string& id, const std::string& snapshot) = 0;
    // Idempotent.
    virtual void remove_snapshot(const std::string& snapshot) = 0;
    // Named volumes: an ext4 image of `bytes` (8 MiB to 64 GiB) in
    // <state dir>/volumes/, mounted into sandboxes whose spec names it
    // (spec.volumes). It outlives them until removed. launch_error: it exists
    // already (EEXIST), or no such volume (ENOENT).
    virtual void create_volume(const std::string& volume, std::uint64_t bytes) = 0;
    virtual volume_info volume_usage(const std::string& volume) = 0;
    // Idempotent. The caller makes sure no sandbox mounts it.
    virtual void remove_volume(const std::string& volume) = 0;
    // Runs one step of a template's build (build_step.hpp) and, when its
    // command exits 0, keeps what it changed as layer spec.layer. Blocks
    // for as long as the step runs (up to its time limit). spec_error: the
    // spec is wrong or its parent is no layer; launch_error EEXIST: the
    // layer exists already.
    virtual build_step_result run_build_step(const build_step_spec& spec) = 0;
    // Pulls a registry image into base layer spec.layer (build_step.hpp).
    // Blocks for as long as the pull runs (up to its time limit).
    // spec_error: a bad reference; launch_error EEXIST: the layer exists;
    // launch_error: the pull or unpack failed (its message says why).
    virtual image_import_result import_image(const image_import_spec& spec) = 0;
    // Removes layer `id` (its read-only root unmounted first). Idempotent.
    // The caller makes sure no sandbox runs on it and no layer stands on it.
    virtual void remove_layer(const std::string& id) = 0;
};

}  // namespace cellgate::launcher
