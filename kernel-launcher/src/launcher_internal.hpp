#pragma once

// What the launcher's parts share: launcher::impl, the launcher's state (its
// config, runtimes, workspace store, exec registry, zygotes and socket root),
// with the teardown guard and step timer that starts and restores use and the
// helpers that name a sandbox's cgroup and read the clock. Each part defines
// the impl members of the state it owns: launcher.cpp (construction, the
// sandboxes' records and status), launch.cpp (the launch sequence), reap.cpp
// (teardown and reaping), checkpoint.cpp (pause and resume), snapshots.cpp,
// volumes.cpp and exec.cpp.

#include "cellgate/launcher/launcher.hpp"
#include "exec_registry.hpp"
#include "kernel_probe.hpp"
#include "oci_config.hpp"
#include "workspace.hpp"
#include "zygote.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::launcher {
namespace fs = std::filesystem;

// Under the node's own parent (--cgroup-parent), so reaping never touches
// another instance's sandboxes.
inline std::string cgroup_parent_of(const launcher_config& cfg) { return "/" + cfg.cgroup_parent; }
inline std::string cgroup_path_of(const launcher_config& cfg, const std::string& id) {
    return cgroup_parent_of(cfg) + "/" + id;
}

inline double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

inline std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The launch's undo list: run in reverse unless the launch completed.
class teardown_guard {
public:
    void add(std::function<void()> undo) { steps_.push_back(std::move(undo)); }
    void dismiss() { steps_.clear(); }
    ~teardown_guard() {
        for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
            try {
                (*it)();
            } catch (...) {
                // Best effort: the remaining steps still run; reap_orphans finds leftovers.
            }
        }
    }

private:
    std::vector<std::function<void()>> steps_;
};

// How long each launch step took, into info.step_ms.
class step_timer {
public:
    explicit step_timer(sandbox_info& info) : info_(info) {}
    void done(const char* name) {
        info_.step_ms[name] = ms_since(start_);
        start_ = clock_type::now();
    }

private:
    sandbox_info& info_;
    clock_type::time_point start_ = clock_type::now();
};

struct launcher::impl {
    launcher_config cfg;
    std::map<std::string, std::unique_ptr<oci_runtime>> runtimes;
    workspace_store workspaces;
    exec_registry execs;
    // --zygote on: the images' zygotes, and runc's seccomp filter as read
    // from the first sandbox it made (the profile is the launcher's own
    // constant, so every runc sandbox has the same).
    zygotes zygote_processes;
    std::mutex filters_mutex;
    std::vector<seccomp_filter> runc_filters;
    bool filters_unreadable = false;  // then no kernel comes from a zygote (each would be a runc start wasted)

    // Where run dirs and exec dirs live: under the state dir, or a short
    // stand-in for it (socket_root_for), made by the first start that needs it.
    fs::path socket_root;
    mutable std::once_flag socket_root_made;

    void ensure_socket_root() const;

    explicit impl(launcher_config c, std::map<std::string, std::unique_ptr<oci_runtime>> r);

    // Whether this start may take its kernel from the image's zygote: runc,
    // and a kernel the zygote's imports fit (one BLAS thread, the zygote's
    // own hash seed, no merging, which wants kernels started alike).
    bool forks_from_zygote(const sandbox_spec& spec, const oci_runtime& rt, const sandbox_info& info);

    // Forks the kernel into the sandbox whose init (tini and a sleep) has
    // just started; returns its supervisor's host pid.
    std::int64_t fork_kernel(const sandbox_info& info, const oci_inputs& in, const fs::path& dir);

    fs::path sandboxes_dir() const { return socket_root / "sandboxes"; }
    fs::path run_dir(const std::string& id) const { return sandboxes_dir() / id; }

    oci_runtime& runtime(const std::string& name) {
        const auto it = runtimes.find(name);
        if (it == runtimes.end()) throw spec_error("unknown runtime '" + name + "'");
        return *it->second;
    }

    std::optional<sandbox_info> read_info(const std::string& id) const;
    std::optional<sandbox_spec> read_spec(const std::string& id) const;

    // Kills and removes everything of sandbox `id`, in the reverse order of
    // launch. Steps that find nothing to do are fine.
    void destroy(const std::string& id, const std::string& runtime_name,
                 const std::optional<fs::path>& workspace_to_remove);

    std::string liveness(int pidfd, const std::string& id, bool relayed) const;

    exec_process exec(const std::string& id, const exec_spec& spec);
    fs::path make_exec_dir() const;

    // Pause: what a stopped sandbox keeps in <state dir>/paused/<id>/ (its
    // records, and the memory image under image/ when the runtime saved one).
    fs::path paused_dir(const std::string& id) const { return cfg.state_dir / "paused" / id; }
    checkpoint_info checkpoint(const std::string& id);
    sandbox_info restore(const std::string& id);
    fs::path snapshot_dir(const std::string& name) const { return cfg.state_dir / "snapshots" / name; }
    snapshot_info snapshot_workspace(const std::string& id, const std::string& snapshot);
    std::optional<workspace_seed> seed_of(const sandbox_spec& spec) const;
    // Named volumes: <state dir>/volumes/<id>.img, mounted at <id>/ while it exists.
    fs::path volume_dir(const std::string& id) const { return cfg.state_dir / "volumes" / id; }
    std::mutex volumes_mutex;
    fs::path mounted_volume(const std::string& id);  // under volumes_mutex
    // The host dirs a sandbox's volumes are bound from; a read-write one's
    // files are moved to the sandbox's uid range first.
    // They are bound (read-only where asked) under <run dir>/volumes/<name>,
    // which the sandbox gets at /volumes: gVisor makes a bind mount's mount
    // point in the image's rootfs, so each volume cannot be a mount of its own.
    fs::path attach_volumes(const sandbox_spec& spec, const fs::path& run_dir, std::uint32_t host_id_base);

    build_step_result run_build_step(const build_step_spec& spec);
    image_import_result import_image(const image_import_spec& spec);

    // The launch sequence, in the order launch() runs it.
    // `zygote`: the kernel may come from the image's zygote (else it starts cold).
    sandbox_info launch(const sandbox_spec& spec, bool zygote);
    sandbox_info describe(const sandbox_spec& spec) const;
    fs::path make_run_dir(sandbox_info& info);
    fs::path prepare_kernel_dir(sandbox_info& info, const fs::path& dir, const workspace& ws, bool relayed);
    // From `image` (a checkpoint) when given: the relay then begins with reset.
    std::int64_t start_container(const sandbox_info& info, const fs::path& dir, const workspace& ws, oci_runtime& rt,
                                 clock_type::time_point deadline, bool& runtime_started, step_timer& steps,
                                 const fs::path* image = nullptr);
    // A link there would have the runtime mount whatever it points to.
    static void check_egress_dir(const sandbox_spec& spec);
    void wait_until_serving(sandbox_info& info, const fs::path& socket_dir, bool relayed,
                            clock_type::time_point deadline, step_timer& steps);

    // The kernel's connection file (in its own dir, owned by it, read-only)
    // and the host's (the same key, the paths the host dials); returns the
    // endpoints the host connects to.
    kernel_endpoints write_connection_files(const fs::path& dir, const fs::path& kernel_dir, const fs::path& socket_dir,
                                            std::uint32_t kernel_uid, std::uint32_t kernel_gid) const;

    // What the OCI config is built from: the image, the mounts, the ids, the
    // limits, the command and the environment (spec env and preloads).
    oci_inputs oci_inputs_for(const sandbox_info& info, const sandbox_spec& spec, const fs::path& kernel_dir,
                              std::uint32_t host_id_base, const oci_runtime& rt) const;
};

}  // namespace cellgate::launcher
