#include "cellgate/launcher/launcher.hpp"

#include "cellgate/protocol/hmac_signer.hpp"
#include "cellgate/protocol/message.hpp"
#include "cellgate/launcher/node_settings.hpp"
#include "cgroups.hpp"
#include "exec_channel.hpp"
#include "exec_shim.hpp"
#include "host_fs.hpp"
#include "kernel_probe.hpp"
#include "oci_config.hpp"
#include "relay_process.hpp"
#include "spec_validation.hpp"
#include "workspace.hpp"
#include "zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>

namespace cellgate::launcher {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Under the node's own parent (--cgroup-parent), so reaping never touches
// another instance's sandboxes.
std::string cgroup_parent_of(const launcher_config& cfg) { return "/" + cfg.cgroup_parent; }
std::string cgroup_path_of(const launcher_config& cfg, const std::string& id) {
    return cgroup_parent_of(cfg) + "/" + id;
}

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

std::int64_t unix_ms_now() {
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

json connection_json(const std::string& ip, const std::string& key) {
    return {{"transport", "ipc"},       {"ip", ip},           {"shell_port", 1},
            {"iopub_port", 2},          {"stdin_port", 3},    {"control_port", 4},
            {"hb_port", 5},             {"key", key},         {"signature_scheme", "hmac-sha256"},
            {"kernel_name", "python3"}};
}

// The processes run through exec(), per sandbox, as the handles' channels
// (watched, never kept alive: a dropped handle leaves at once), and the
// starts under way, which count too, so that two at once cannot both take
// the last place.
class exec_registry {
public:
    class reservation {
    public:
        reservation(exec_registry& r, std::string id) : r_(&r), id_(std::move(id)) {}
        reservation(const reservation&) = delete;
        reservation& operator=(const reservation&) = delete;
        ~reservation() {
            if (r_ != nullptr) r_->settle(id_, {});
        }
        void commit(std::weak_ptr<exec_channel::state> watch) { std::exchange(r_, nullptr)->settle(id_, std::move(watch)); }

    private:
        exec_registry* r_;
        std::string id_;
    };

    reservation reserve(const std::string& id, std::uint32_t per_sandbox, std::uint32_t total) {
        std::lock_guard lock(mutex_);
        std::size_t all = 0;
        for (auto it = execs_.begin(); it != execs_.end();) {
            auto& list = it->second;
            std::erase_if(list, [](const std::weak_ptr<exec_channel::state>& w) {
                const auto s = w.lock();
                return !s || s->ended();
            });
            all += list.size();
            it = list.empty() ? execs_.erase(it) : std::next(it);
        }
        for (const auto& [sandbox, n] : starting_) all += n;
        const auto here = (execs_.count(id) != 0 ? execs_[id].size() : 0) + starting_[id];
        if (here >= per_sandbox || all >= total) {
            if (starting_[id] == 0) starting_.erase(id);
            throw launch_error("exec-limit",
                               here >= per_sandbox
                                   ? "sandbox '" + id + "' already runs " + std::to_string(here) +
                                         " processes through exec (at most " + std::to_string(per_sandbox) + ")"
                                   : "this launcher already runs " + std::to_string(all) +
                                         " processes through exec (at most " + std::to_string(total) + ")",
                               EAGAIN);
        }
        ++starting_[id];
        return reservation(*this, id);
    }

    std::vector<std::shared_ptr<exec_channel::state>> live(const std::string& id) {
        std::lock_guard lock(mutex_);
        std::vector<std::shared_ptr<exec_channel::state>> out;
        if (const auto it = execs_.find(id); it != execs_.end())
            for (const auto& w : it->second)
                if (auto s = w.lock()) out.push_back(std::move(s));
        return out;
    }

private:
    void settle(const std::string& id, std::weak_ptr<exec_channel::state> watch) {
        std::lock_guard lock(mutex_);
        if (--starting_[id] == 0) starting_.erase(id);
        if (!watch.expired()) execs_[id].push_back(std::move(watch));
    }

    std::mutex mutex_;
    std::map<std::string, std::vector<std::weak_ptr<exec_channel::state>>> execs_;
    std::map<std::string, std::uint32_t> starting_;
};

// Where the launcher keeps run dirs and exec dirs, whose sockets the host
// dials by path. A unix socket's path holds at most 107 bytes, and the
// longest made there is <root>/sandboxes/<id of 64>/relay/k-5 (gVisor's
// relay), so the root has 22 bytes: the state dir when it is that short, else
// a stand-in for it, /run/cellgate/<hash of the state dir>, the same for every
// start with that state dir (its sandboxes are found again), linked from the
// state dir as `sandboxes`. A state dir of any depth then works, and where no
// stand-in can be made the launcher refuses to start, saying why.
constexpr std::size_t max_socket_root = 22;

fs::path socket_root_for(const fs::path& state_dir) {
    if (state_dir.native().size() <= max_socket_root) return state_dir;
    const fs::path root = fs::path("/run/cellgate") / name_hash(fs::absolute(state_dir).lexically_normal(), 8);
    // Made at the first start (nothing is made for a launcher that starts
    // nothing); checked now, so a launcher that could not make it refuses to
    // start instead of failing each sandbox.
    const auto usable = [](const fs::path& dir) { return ::access(dir.c_str(), W_OK | X_OK) == 0; };
    if (!(usable(root) || usable(root.parent_path()) || (!fs::exists(root.parent_path()) && usable("/run"))))
        throw launch_error("state-dir",
                           "the state dir " + state_dir.string() + " is longer than the " +
                               std::to_string(max_socket_root) +
                               " bytes its sandboxes' socket paths allow, and its short stand-in " + root.string() +
                               " cannot be made (a shorter --state-dir, or run as root)",
                           EACCES);
    return root;
}

// The stand-in of a deep state dir, and the link to it (socket_root_for).
void make_socket_root(const fs::path& state_dir, const fs::path& root) {
    std::error_code ec;
    fs::create_directories(root.parent_path(), ec);
    make_dir("prepare-run-dir", root, 0711);
    fs::create_directories(state_dir, ec);
    const auto link = state_dir / "sandboxes";
    if (!fs::exists(fs::symlink_status(link, ec))) fs::create_directory_symlink(root / "sandboxes", link, ec);
}

// A directory removed with everything in it when the scope ends.
struct dir_remover {
    fs::path dir;
    ~dir_remover() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

}  // namespace

class step_timer;

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

    void ensure_socket_root() const {
        if (socket_root != cfg.state_dir)  // a failed attempt is tried again by the next start
            std::call_once(socket_root_made, [this] { make_socket_root(cfg.state_dir, socket_root); });
    }

    explicit impl(launcher_config c, std::map<std::string, std::unique_ptr<oci_runtime>> r)
        : cfg(std::move(c)), runtimes(std::move(r)),
          workspaces(cfg.workspace_root, cfg.host_id_base, cfg.max_slots), zygote_processes(cfg.state_dir),
          socket_root(socket_root_for(cfg.state_dir)) {}

    // Whether this start may take its kernel from the image's zygote: runc,
    // and a kernel the zygote's imports fit (one BLAS thread, the zygote's
    // own hash seed, no merging, which wants kernels started alike).
    bool forks_from_zygote(const sandbox_spec& spec, const oci_runtime& rt, const sandbox_info& info) {
        if (!cfg.zygote || rt.name() != "runc" || info.memory_merge || spec.limits.cpu_millis > 1000) return false;
        {
            const std::lock_guard lock(filters_mutex);
            if (filters_unreadable) return false;
        }
        for (const auto& [name, value] : spec.env)
            if (name == "PYTHONHASHSEED" || name == "MPLBACKEND" || name.ends_with("_NUM_THREADS") ||
                name == "NUMEXPR_MAX_THREADS")
                return false;
        return zygote_processes.ready(info.image);
    }

    // Forks the kernel into the sandbox whose init (tini and a sleep) has
    // just started; returns its supervisor's host pid.
    std::int64_t fork_kernel(const sandbox_info& info, const oci_inputs& in, const fs::path& dir) {
        std::vector<seccomp_filter> filters;
        {
            const std::lock_guard lock(filters_mutex);
            if (runc_filters.empty()) {
                try {
                    runc_filters = read_seccomp_filters(info.pid);
                } catch (const launch_error&) {
                    filters_unreadable = true;
                    throw;
                }
                if (runc_filters.empty()) filters_unreadable = true;
            }
            filters = runc_filters;
        }
        if (filters.empty()) throw launch_error("zygote-fork", "runc gave the sandbox no seccomp filter", EINVAL);
        const unique_fd log = open_kernel_log("zygote-fork", dir);
        zygote_fork f;
        f.init_pid = info.pid;
        f.cgroups_path = in.cgroups_path;
        f.log_fd = log.get();
        f.uid = in.uid;
        f.gid = in.gid;
        f.nofile = in.limits.nofile;
        f.fsize = effective_fsize(in.limits);
        f.seccomp = std::move(filters);
        return zygote_processes.fork_kernel(info.image, f);
    }

    fs::path sandboxes_dir() const { return socket_root / "sandboxes"; }
    fs::path run_dir(const std::string& id) const { return sandboxes_dir() / id; }

    oci_runtime& runtime(const std::string& name) {
        const auto it = runtimes.find(name);
        if (it == runtimes.end()) throw spec_error("unknown runtime '" + name + "'");
        return *it->second;
    }

    std::optional<sandbox_info> read_info(const std::string& id) const {
        const auto text = read_file(run_dir(id) / "info.json");
        if (text.empty()) return std::nullopt;
        try {
            return sandbox_info_from_json(json::parse(text));
        } catch (...) {
            return std::nullopt;
        }
    }

    std::optional<sandbox_spec> read_spec(const std::string& id) const {
        auto text = read_file(run_dir(id) / "spec.json");
        if (text.empty()) text = read_file(paused_dir(id) / "spec.json");  // a paused sandbox's
        if (text.empty()) return std::nullopt;
        try {
            return json::parse(text).get<sandbox_spec>();
        } catch (...) {
            return std::nullopt;
        }
    }

    // Kills and removes everything of sandbox `id`, in the reverse order of
    // launch. Steps that find nothing to do are fine.
    void destroy(const std::string& id, const std::string& runtime_name,
                 const std::optional<fs::path>& workspace_to_remove) {
        // Every step runs even when an earlier one failed; the first failure is
        // reported once all have had their go.
        std::exception_ptr first;
        auto attempt = [&first](auto&& fn) {
            try {
                fn();
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        };
        // The sandbox's end kills its execs anyway; saying so first lets each
        // report SIGKILL even where the runtime cannot tell (runsc).
        for (const auto& e : execs.live(id)) e->send_signal(SIGKILL);
        if (auto it = runtimes.find(runtime_name); it != runtimes.end()) {
            try {
                it->second->kill(id, SIGKILL, true);  // delete --force kills too
            } catch (...) {
            }
            attempt([&] { it->second->remove(id); });
        }
        // A relay ends by itself once its sandbox is gone; one that does not is killed.
        attempt([&] { stop_relay(run_dir(id), std::chrono::seconds(1)); });
        attempt([&] {
            const auto left = remove_cgroup(cgroup_path_of(cfg, id), /*kill_busy=*/true);
            if (!left.empty())
                throw launch_error("remove-cgroup", "cgroup still busy: " + left.front(), EBUSY);
        });
        const auto dir = run_dir(id);
        attempt([&] {
            for (const auto& m : mounts_under(dir)) unmount("remove-run-dir", m);
            if (::rmdir(dir.c_str()) != 0 && errno != ENOENT)
                throw launch_error("remove-run-dir", "rmdir " + dir.string(), errno);
        });
        if (workspace_to_remove) attempt([&] { workspaces.remove(*workspace_to_remove); });
        if (first) std::rethrow_exception(first);
    }

    std::string liveness(int pidfd, const std::string& id, bool relayed) const {
        pollfd p{pidfd, POLLIN, 0};
        const auto oom = [&] {
            return read_cgroup(cgroup_path_of(cfg, id)).oom_killed ? " after the memory limit's OOM kill" : "";
        };
        if (::poll(&p, 1, 0) <= 0) {
            if (!relayed || relay_running(run_dir(id))) return {};
            // The relay can see the sandbox's output close before the runtime
            // process is reaped: the OOM kill is recorded by then either way.
            return std::string("its relay ended") + oom() + ": " +
                   read_tail(relay_paths_of(run_dir(id)).log, 1000);
        }
        std::string why = relayed ? "the sandbox exited" : "its init exited";
        why += oom();
        const auto log = read_tail(run_dir(id) / "kernel.log", 1500);
        if (!log.empty()) why += "; log tail: " + log;
        return why;
    }

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
                                            std::uint32_t kernel_uid, std::uint32_t kernel_gid) const {
        kernel_endpoints e;
        e.key = protocol::make_kernel_key();
        write_file("write-connection-file", kernel_dir / "connection.json",
                   connection_json("/run/kernel/k", e.key).dump(), 0400, kernel_uid, kernel_gid);
        e.connection_file = (dir / "connection.json").string();
        write_file("write-connection-file", e.connection_file,
                   connection_json((socket_dir / "k").string(), e.key).dump(2), 0600);
        const std::string ipc = "ipc://" + (socket_dir / "k").string();
        e.shell = ipc + "-1";
        e.iopub = ipc + "-2";
        e.stdin_ = ipc + "-3";
        e.control = ipc + "-4";
        e.hb = ipc + "-5";
        return e;
    }

    // What the OCI config is built from: the image, the mounts, the ids, the
    // limits, the command and the environment (spec env and preloads).
    oci_inputs oci_inputs_for(const sandbox_info& info, const sandbox_spec& spec, const fs::path& kernel_dir,
                              std::uint32_t host_id_base, const oci_runtime& rt) const {
        const bool relayed = rt.traits().relays_kernel_sockets;
        oci_inputs in;
        in.id = info.id;
        in.rootfs = info.image;
        in.workspace_dir = info.workspace_dir;
        in.kernel_dir = kernel_dir.string();
        in.egress_dir = spec.egress_dir;
        in.host_id_base = host_id_base;
        in.uid = spec.uid;
        in.gid = spec.gid;
        in.limits = spec.limits;
        in.args = relayed ? relayed_kernel_args() : kernel_args();
        if (rt.name() == "runsc")
            in.gvisor = oci_inputs::gvisor_inputs{relay_paths_of(fs::path(info.run_dir)).script_dir.string()};
        in.env = base_environment(spec.limits);
        for (const auto& [name, value] : spec.env) in.env.push_back(name + "=" + value);
        if (info.memory_merge) {
            // The entry point opts into KSM; a fixed string hash seed lays out
            // the imports' dicts alike in every kernel (a caller's seed stands).
            in.env.push_back("CELLGATE_MEMORY_MERGE=1");
            if (!spec.env.contains("PYTHONHASHSEED")) in.env.push_back("PYTHONHASHSEED=0");
        }
        if (!spec.preload.empty()) {
            std::string modules;
            for (const auto& m : spec.preload) modules += (modules.empty() ? "" : ",") + m;
            in.env.push_back("CELLGATE_PRELOAD=" + modules);
        }
        in.cgroups_path = cgroup_path_of(cfg, info.id);
        return in;
    }
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

sandbox_info launcher::impl::describe(const sandbox_spec& spec) const {
    sandbox_info info;
    info.id = spec.id.empty() ? protocol::make_uuid() : spec.id;
    info.runtime = spec.runtime;
    info.spec = spec;
    info.spec.id = info.id;
    info.image = resolve_image(spec.image, cfg).string();
    info.created_unix_ms = unix_ms_now();
    return info;
}

fs::path launcher::impl::make_run_dir(sandbox_info& info) {
    std::error_code ec;
    fs::create_directories(cfg.state_dir.parent_path(), ec);
    make_dir("prepare-run-dir", cfg.state_dir, 0711);
    ensure_socket_root();
    make_dir("prepare-run-dir", sandboxes_dir(), 0711);
    const fs::path dir = run_dir(info.id);
    info.run_dir = dir.string();
    if (::mkdir(dir.c_str(), 0711) != 0) {
        if (errno == EEXIST) throw spec_error("a sandbox with id '" + info.id + "' already exists");
        throw launch_error("prepare-run-dir", "mkdir " + dir.string(), errno);
    }
    return dir;
}

// The kernel's sockets and connection file; the dir is the kernel's until
// its sockets are bound, then it is locked (wait_until_serving). The image's
// entry point keeps ipykernel from rewriting the file (which would race the
// lock). Returns where the host connects: the kernel's own sockets, or under
// gVisor the relay's, which speak the same ZMTP to the kernel through the
// sandbox.
fs::path launcher::impl::prepare_kernel_dir(sandbox_info& info, const fs::path& dir, const workspace& ws,
                                            bool relayed) {
    const auto uid = ws.host_id_base + info.spec.uid, gid = ws.host_id_base + info.spec.gid;
    const fs::path kernel_dir = dir / "kernel";
    make_dir("prepare-run-dir", kernel_dir, 0700);
    change_owner("prepare-run-dir", kernel_dir, uid, gid, 0700);
    const fs::path socket_dir = relayed ? relay_paths_of(dir).socket_dir : kernel_dir;
    info.endpoints = write_connection_files(dir, kernel_dir, socket_dir, uid, gid);
    return socket_dir;
}

// Starts the relay (gVisor) and the container; returns the init's host pid.
// `runtime_started` tells the caller's teardown that there is now a
// container or relay to stop.
std::int64_t launcher::impl::start_container(const sandbox_info& info, const fs::path& dir, const workspace& ws,
                                             oci_runtime& rt, clock_type::time_point deadline,
                                             bool& runtime_started, step_timer& steps, const fs::path* image) {
    relay_pipes pipes;
    if (rt.traits().relays_kernel_sockets) {
        runtime_started = true;  // from here a teardown must stop the relay
        start_relay(find_relay_binary(cfg.relay_path), dir, ws.host_id_base + info.spec.uid,
                    ws.host_id_base + info.spec.gid, pipes, /*resumed=*/image != nullptr);
        steps.done("relay");
    }
    const unique_fd log = open_kernel_log("runtime-run", dir);
    runtime_started = true;
    const container_start io{pipes.sandbox_stdin, pipes.sandbox_stdout, log.get(), deadline};
    return image != nullptr ? rt.restore(info.id, dir, *image, io) : rt.run(info.id, dir, io);
}

void launcher::impl::check_egress_dir(const sandbox_spec& spec) {
    if (spec.egress_dir.empty()) return;
    struct stat st{};
    if (::lstat(spec.egress_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw launch_error("prepare-egress", "egress_dir " + spec.egress_dir + " is not a directory", errno);
}

// Waits for the kernel's sockets, locks its dir, and asks it kernel_info.
void launcher::impl::wait_until_serving(sandbox_info& info, const fs::path& socket_dir, bool relayed,
                                        clock_type::time_point deadline, step_timer& steps) {
    const int pidfd = pidfd_open(info.pid);
    if (pidfd < 0) throw launch_error("runtime-run", "the sandbox's init is already gone", errno);
    struct fd_closer {
        int fd;
        ~fd_closer() { ::close(fd); }
    } pidfd_closer{pidfd};
    const liveness_check alive = [&] { return liveness(pidfd, info.id, relayed); };

    wait_for_sockets(socket_dir, deadline, alive);
    // From here the kernel may not add, rename or replace anything in its run
    // dir: the host connects to these paths, and a link planted there would
    // point the gateway at a socket of the kernel's choosing.
    change_owner("lock-kernel-dir", fs::path(info.run_dir) / "kernel", 0, 0, 0755);
    verify_sockets(socket_dir);
    steps.done("sockets");
    request_kernel_info(info.endpoints, deadline, alive);
    steps.done("kernel_info");
}

sandbox_info launcher::impl::launch(const sandbox_spec& spec, bool zygote) {
    const auto t0 = clock_type::now();
    const auto deadline = t0 + spec.start_timeout;
    validate_spec(spec, cfg);
    oci_runtime& rt = runtime(spec.runtime);
    const bool relayed = rt.traits().relays_kernel_sockets;
    sandbox_info info = describe(spec);
    info.platform = rt.platform();
    info.platform_reason = rt.platform_reason();
    info.memory_merge = cfg.memory_merge && rt.name() == "runc";
    step_timer steps(info);

    // Run dir: a small tmpfs of its own, so nothing the kernel writes to its
    // log or sockets can fill the host.
    const fs::path dir = make_run_dir(info);
    // Declared before the guard: its undo step reads them as it unwinds.
    std::optional<fs::path> workspace_created;
    bool runtime_started = false;
    teardown_guard guard;
    guard.add([&] {
        if (!runtime_started) {
            for (const auto& m : mounts_under(dir)) unmount("teardown", m);
            ::rmdir(dir.c_str());
            if (workspace_created) workspaces.remove(*workspace_created);
        } else {
            destroy(info.id, info.runtime, workspace_created);
        }
    });
    mount_tmpfs("prepare-run-dir", dir, cfg.run_dir_bytes, 0711);
    const fs::path ws_dir = workspace_for(spec, info.id, cfg);
    info.workspace_dir = ws_dir.string();
    info.spec.workspace_dir = info.workspace_dir;
    write_file("prepare-run-dir", dir / "spec.json", json(info.spec).dump(2), 0600);
    steps.done("run_dir");

    const auto seed = seed_of(spec);
    const auto ws = workspaces.ensure(ws_dir, spec.limits.workspace_bytes, spec.uid, spec.gid,
                                      seed ? &*seed : nullptr);
    if (ws.created) workspace_created = ws_dir;
    info.host_uid_base = ws.host_id_base;
    steps.done("workspace");

    const fs::path socket_dir = prepare_kernel_dir(info, dir, ws, relayed);
    auto in = oci_inputs_for(info, spec, dir / "kernel", ws.host_id_base, rt);
    info.zygote = zygote && forks_from_zygote(spec, rt, info);
    if (info.zygote) {
        // The container's process only holds the sandbox (and reaps its
        // orphans); the kernel comes from the zygote and reads its
        // environment here, inside, where the zygote never sees it.
        json env = json::object();
        for (const auto& e : in.env) {
            const auto eq = e.find('=');
            if (eq != std::string::npos) env[e.substr(0, eq)] = e.substr(eq + 1);
        }
        write_file("prepare-run-dir", dir / "kernel" / "environ.json", env.dump(), 0400,
                   ws.host_id_base + spec.uid, ws.host_id_base + spec.gid);
        in.args = zygote_sandbox_args();
    }
    if (!spec.volumes.empty()) in.volumes_dir = attach_volumes(spec, dir, ws.host_id_base).string();
    write_file("build-config", dir / "config.json", build_oci_config(in).dump(2), 0600);
    steps.done("config");
    check_egress_dir(spec);
    if (in.gvisor) {
        for (const auto& p : {fs::path(info.image), ws_dir, dir / "kernel", relay_paths_of(dir).script_dir})
            require_searchable_by_others("runtime-run", p);
        if (!in.volumes_dir.empty()) require_searchable_by_others("runtime-run", in.volumes_dir);
        if (!spec.egress_dir.empty()) require_searchable_by_others("runtime-run", spec.egress_dir);
    }

    info.pid = start_container(info, dir, ws, rt, deadline, runtime_started, steps);
    steps.done("runtime_run");
    if (info.zygote) {
        info.kernel_pid = fork_kernel(info, in, dir);
        steps.done("zygote_fork");
    }
    wait_until_serving(info, socket_dir, relayed, deadline, steps);
    info.step_ms["total"] = ms_since(t0);

    write_file("record-sandbox", dir / "info.json", to_persisted_json(info).dump(2), 0600);
    guard.dismiss();
    // A paused sandbox started fresh (its runtime saved no memory, or its
    // owner chose a new kernel): what the pause kept is over.
    std::error_code ec;
    fs::remove_all(paused_dir(info.id), ec);
    return info;
}

namespace {

// Runs every step, even after one failed; rethrows the first failure.
void attempt_all(std::initializer_list<std::function<void()>> steps) {
    std::exception_ptr first;
    for (const auto& step : steps) {
        try {
            step();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

std::uint64_t tree_bytes(const fs::path& dir) {
    std::uint64_t total = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
        if (it->is_regular_file(ec)) total += it->file_size(ec);
    return total;
}

}  // namespace

checkpoint_info launcher::impl::checkpoint(const std::string& id) {
    const auto t0 = clock_type::now();
    const auto info = read_info(id);
    if (!info) throw launch_error("checkpoint", "no sandbox '" + id + "'", ESRCH);
    oci_runtime& rt = runtime(info->runtime);
    if (rt.state(id).status != "running") throw launch_error("checkpoint", "sandbox '" + id + "' is not running", ESRCH);
    const fs::path pdir = paused_dir(id);
    std::error_code ec;
    fs::remove_all(pdir, ec);
    make_dir("checkpoint", cfg.state_dir / "paused", 0700);
    make_dir("checkpoint", pdir, 0700, /*must_not_exist=*/true);
    const fs::path dir = run_dir(id);
    for (const char* name : {"spec.json", "info.json", "config.json"})
        write_file("checkpoint", pdir / name, read_file(dir / name), 0600);
    // What runs beside the kernel (commands, terminals) is not carried over:
    // its host side (the exec shim, the caller's pipes) cannot be.
    for (const auto& e : execs.live(id)) e->send_signal(SIGKILL);
    checkpoint_info out;
    std::exception_ptr failed;
    if (rt.can_checkpoint()) {
        try {
            make_dir("checkpoint", pdir / "image", 0700);
            rt.checkpoint(id, pdir / "image");
            out.memory = true;
            out.image_bytes = tree_bytes(pdir / "image");
        } catch (...) {
            failed = std::current_exception();
            fs::remove_all(pdir, ec);
        }
    }
    if (out.memory) {
        // The container, its relay and its cgroup go; its run dir stays as it
        // is: a restore re-validates the host files the sandbox had looked
        // up, and a re-made run dir (a new tmpfs, a rewritten relay script)
        // had it refuse every mount with EINVAL.
        attempt_all({[&] { rt.remove(id); }, [&] { stop_relay(dir, std::chrono::seconds(1)); },
                     [&] { remove_cgroup(cgroup_path_of(cfg, id), /*kill_busy=*/true); }});
    } else {
        destroy(id, info->runtime, std::nullopt);  // stopped; its files stay
    }
    if (failed) std::rethrow_exception(failed);
    out.ms = ms_since(t0);
    write_file("checkpoint", pdir / "paused.json",
               json{{"memory", out.memory}, {"image_bytes", out.image_bytes}, {"paused_unix_ms", unix_ms_now()}}.dump(),
               0600);
    return out;
}

sandbox_info launcher::impl::restore(const std::string& id) {
    const auto t0 = clock_type::now();
    const fs::path pdir = paused_dir(id);
    const fs::path dir = run_dir(id);
    const auto meta = json::parse(read_file(pdir / "paused.json"), nullptr, false);
    if (!meta.is_object() || !meta.value("memory", false))
        throw launch_error("restore", "sandbox '" + id + "' has no saved memory to restore", ENOENT);
    std::error_code ec;
    if (!fs::exists(dir / "config.json", ec))
        throw launch_error("restore", "the run dir of paused sandbox '" + id +
                                          "' is gone (the host restarted?): its memory cannot be restored", ENOENT);
    sandbox_info info;
    try {
        info = sandbox_info_from_json(json::parse(read_file(pdir / "info.json")));
    } catch (const std::exception& e) {
        throw launch_error("restore", "the records of paused sandbox '" + id + "' are unreadable: " + e.what(), EIO);
    }
    const sandbox_spec& spec = info.spec;
    oci_runtime& rt = runtime(info.runtime);
    if (!rt.can_checkpoint()) throw launch_error("restore", "runtime " + info.runtime + " cannot restore", ENOTSUP);
    info.step_ms.clear();
    step_timer steps(info);
    const auto deadline = t0 + spec.start_timeout;
    teardown_guard guard;
    // A failed restore ends the sandbox (its image stays until remove()); the
    // workspace is the session's and stays.
    guard.add([&] { destroy(info.id, info.runtime, std::nullopt); });
    const auto ws = workspaces.ensure(info.workspace_dir, spec.limits.workspace_bytes, spec.uid, spec.gid);
    if (ws.host_id_base != info.host_uid_base)
        throw launch_error("restore", "the workspace's host uid range moved since the pause", EINVAL);
    steps.done("workspace");
    const auto relay = relay_paths_of(dir);
    // What the last relay and runtime left; the directories themselves stay (see checkpoint).
    for (const auto& stale : {relay.pid_file, relay.lock, dir / "init.pid"})
        fs::remove(stale, ec);
    check_egress_dir(spec);
    bool runtime_started = false;  // the teardown destroys whatever there is anyway
    const auto image = pdir / "image";
    info.pid = start_container(info, dir, ws, rt, deadline, runtime_started, steps, &image);
    steps.done("runtime_restore");
    try {
        wait_until_serving(info, relay.socket_dir, /*relayed=*/true, deadline, steps);
    } catch (const launch_error& e) {
        // What the sandbox and its relay said is the only clue to a bad image.
        throw launch_error(e.step(), std::string(e.what()) + "; sandbox log: " + read_tail(dir / "kernel.log", 600) +
                                         "; relay log: " + read_tail(relay.log, 600),
                           e.error_number());
    }
    info.step_ms["total"] = ms_since(t0);
    fs::remove(dir / "info.json", ec);  // the record of its start before the pause
    write_file("record-sandbox", dir / "info.json", to_persisted_json(info).dump(2), 0600);
    guard.dismiss();
    fs::remove_all(pdir, ec);
    return info;
}

snapshot_info launcher::impl::snapshot_workspace(const std::string& id, const std::string& snapshot) {
    const auto t0 = clock_type::now();
    const auto info = read_info(id);
    fs::path ws_dir = info ? fs::path(info->workspace_dir) : cfg.workspace_root / id;
    make_dir("snapshot", cfg.state_dir / "snapshots", 0700);
    const fs::path sdir = snapshot_dir(snapshot);
    make_dir("snapshot", sdir, 0700, /*must_not_exist=*/true);
    teardown_guard guard;
    guard.add([&] {
        std::error_code ec;
        fs::remove_all(sdir, ec);
    });
    const auto copy = workspaces.copy_image(ws_dir, sdir / "workspace.img");  // ENOENT: no workspace
    // Paused with its files only, a sandbox has no run dir: its slot says.
    const std::uint32_t base = info ? info->host_uid_base : workspaces.host_id_base(ws_dir);
    snapshot_info out;
    out.bytes = copy.bytes;
    out.disk_bytes = copy.disk_bytes;
    out.reflinked = copy.reflinked;
    out.ms = ms_since(t0);
    write_file("snapshot", sdir / "snapshot.json",
               json{{"source", id}, {"host_id_base", base}, {"bytes", out.bytes}, {"created_unix_ms", unix_ms_now()}}
                   .dump(),
               0600);
    guard.dismiss();
    return out;
}

std::optional<workspace_seed> launcher::impl::seed_of(const sandbox_spec& spec) const {
    if (spec.from_snapshot.empty()) return std::nullopt;
    const fs::path sdir = snapshot_dir(spec.from_snapshot);
    const auto meta = json::parse(read_file(sdir / "snapshot.json"), nullptr, false);
    if (!meta.is_object() || !meta.contains("host_id_base"))
        throw launch_error("prepare-workspace", "no snapshot '" + spec.from_snapshot + "'", ENOENT);
    return workspace_seed{sdir / "workspace.img", meta.at("host_id_base").get<std::uint32_t>()};
}

fs::path launcher::impl::mounted_volume(const std::string& id) {
    const fs::path dir = volume_dir(id);
    const fs::path image = dir.string() + ".img";
    struct stat st{};
    if (::lstat(image.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw launch_error("prepare-volumes", "no volume '" + id + "'", ENOENT);
    if (is_mount_point(dir)) return dir;
    make_dir("prepare-volumes", dir, 0755);
    mount_ext4_image(image, dir);
    return dir;
}

fs::path launcher::impl::attach_volumes(const sandbox_spec& spec, const fs::path& run_dir, std::uint32_t host_id_base) {
    const fs::path top = run_dir / "volumes";
    make_dir("prepare-volumes", top, 0755);
    std::lock_guard lock(volumes_mutex);
    for (const auto& v : spec.volumes) {
        const fs::path dir = mounted_volume(v.volume);
        if (!v.read_only) {
            // Its writer owns its files: from the last writer's uid range to this one's.
            const fs::path meta = dir.string() + ".json";
            const auto j = json::parse(read_file(meta), nullptr, false);
            const auto last = j.is_object() ? j.value("host_id_base", std::int64_t{-1}) : std::int64_t{-1};
            if (last >= 0 && static_cast<std::uint32_t>(last) != host_id_base)
                remap_owners(dir, static_cast<std::uint32_t>(last), host_id_base);
            change_owner("prepare-volumes", dir, host_id_base + spec.uid, host_id_base + spec.gid, 0755);
            std::error_code ec;
            fs::remove(meta, ec);  // write_file makes a new file, never follows or reuses one
            write_file("prepare-volumes", meta, json{{"host_id_base", host_id_base}}.dump(), 0600);
        }
        const fs::path at = top / fs::path(v.path).filename();
        make_dir("prepare-volumes", at, 0755);
        if (::mount(dir.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) != 0)
            throw launch_error("prepare-volumes", "bind " + dir.string(), errno);
        const unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC | (v.read_only ? MS_RDONLY : 0);
        if (::mount(nullptr, at.c_str(), nullptr, flags, nullptr) != 0)
            throw launch_error("prepare-volumes", "remount " + at.string(), errno);
    }
    return top;
}

fs::path launcher::impl::make_exec_dir() const {
    const auto root = socket_root / "execs";
    ensure_socket_root();
    make_dir("exec", root, 0700);
    const auto dir = root / protocol::make_uuid();
    make_dir("exec", dir, 0700, /*must_not_exist=*/true);
    return dir;
}

namespace {

// The listening end of the console socket a runtime sends a PTY master to.
unique_fd listen_for_console(const fs::path& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.native().size() >= sizeof addr.sun_path)
        throw launch_error("exec", "the console socket path is too long (a shorter --state-dir helps): " + path.string(),
                           ENAMETOOLONG);
    std::memcpy(addr.sun_path, path.c_str(), path.native().size());
    unique_fd s{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (!s || ::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s.get(), 1) != 0)
        throw launch_error("exec", "console socket " + path.string(), errno);
    return s;
}

struct pipe_pair {
    unique_fd read, write;
};
pipe_pair make_pipe() {
    int fds[2] = {-1, -1};
    if (::pipe2(fds, O_CLOEXEC) != 0) throw launch_error("exec", "pipe", errno);
    return {unique_fd(fds[0]), unique_fd(fds[1])};
}

}  // namespace

exec_process launcher::impl::exec(const std::string& id, const exec_spec& spec) {
    const auto info = read_info(id);
    if (!info) throw launch_error("exec", "no sandbox '" + id + "'", ESRCH);
    oci_runtime& rt = runtime(info->runtime);
    if (rt.state(id).status != "running") throw launch_error("exec", "sandbox '" + id + "' is not running", ESRCH);
    const auto shim = find_exec_shim_binary(cfg.exec_shim_path);
    if (shim.empty())
        throw launch_error("exec", "cellgate-exec-shim is " +
                                       (cfg.exec_shim_path.empty() ? std::string("neither next to this program nor in PATH")
                                                                   : "not at '" + cfg.exec_shim_path + "'"),
                           ENOENT);
    auto place = execs.reserve(id, cfg.max_execs_per_sandbox, cfg.max_execs);

    // The process is the sandbox's own, as written at its launch (a root-only
    // file the kernel never sees), with the exec's argv, cwd, env and terminal.
    const auto config = json::parse(read_file(run_dir(id) / "config.json"), nullptr, false);
    if (!config.is_object() || !config.contains("process") || !config["process"].is_object())
        throw launch_error("exec", "the config.json of sandbox '" + id + "' is unreadable", EIO);
    const dir_remover dir{make_exec_dir()};
    exec_files files{dir.dir / "process.json", dir.dir, spec.tty ? dir.dir / "console" : fs::path()};
    write_file("exec", files.process_json,
               build_exec_process(config["process"], spec, base_environment(info->spec.limits)).dump(), 0600);

    exec_process::stdio ours;
    shim_stdio theirs;
    pipe_pair in, out, err;
    unique_fd console;
    if (spec.tty) {
        console = listen_for_console(files.console_socket);
    } else {
        if (spec.stdin_) {
            in = make_pipe();
            theirs.stdin_fd = in.read.get();
            ours.stdin_ = std::move(in.write);
        }
        out = make_pipe();
        err = make_pipe();
        theirs.stdout_fd = out.write.get();
        theirs.stderr_fd = err.write.get();
        ours.stdout_ = std::move(out.read);
        ours.stderr_ = std::move(err.read);
    }
    auto started = start_exec_shim(shim, shim_request{rt.exec_command_for(id, files), std::chrono::seconds(30)}, theirs,
                                   std::move(ours), console.get(), spec.rows, spec.cols);
    place.commit(started.watch);
    return std::move(started.process);
}

launcher::launcher(launcher_config config) : launcher(config, {}) {}

launcher::launcher(launcher_config config, std::map<std::string, std::unique_ptr<oci_runtime>> runtimes)
    : config_(config) {
    check_node_settings(config_);  // refuses a range that overlaps /etc/subuid, a bad cgroup parent
    if (runtimes.empty()) {
        runtimes.emplace("runc", make_runc_runtime(config.runc_path, config.state_dir / "runc", config.memory_merge));
        runtimes.emplace("runsc", make_runsc_runtime(config.runsc_path, config.state_dir / "runsc",
                                                     config.runsc_platform, config.note));
    }
    impl_ = std::make_unique<impl>(std::move(config), std::move(runtimes));
    if (impl_->cfg.zygote) {
        // The default image's zygote imports while the node starts; until it
        // is ready, kernels start cold.
        try {
            impl_->zygote_processes.ready(resolve_image(sandbox_spec{}.image, impl_->cfg).string());
        } catch (const std::exception&) {
        }
    }
}

launcher::~launcher() = default;

void launcher::validate(const sandbox_spec& spec) const {
    validate_spec(spec, config_);
    const auto it = impl_->runtimes.find(spec.runtime);
    if (it == impl_->runtimes.end()) {
        std::string known;
        for (const auto& [name, rt] : impl_->runtimes) known += (known.empty() ? "" : ", ") + name;
        throw spec_error("unknown runtime '" + spec.runtime + "' (known: " + known + ")");
    }
    if (const auto why = it->second->unavailable_reason(); !why.empty())
        throw spec_error("runtime '" + spec.runtime + "' is not available: " + why);
    if (it->second->traits().relays_kernel_sockets && find_relay_binary(config_.relay_path).empty())
        throw spec_error("runtime '" + spec.runtime + "' needs cellgate-relay, which is neither " +
                         (config_.relay_path.empty() ? "next to this program nor in PATH"
                                                     : "at '" + config_.relay_path + "'"));
}

sandbox_info launcher::launch(const sandbox_spec& spec) {
    validate(spec);
    try {
        return impl_->launch(spec, true);
    } catch (const launch_error& e) {
        // The zygote ended (or broke) between its "ready" and this fork: the
        // half-made sandbox is gone (the launch's teardown), and this start
        // goes cold; the next one starts a new zygote.
        if (!std::string_view(e.step()).starts_with("zygote")) throw;
        return impl_->launch(spec, false);
    }
}

snapshot_info launcher::snapshot_workspace(const std::string& id, const std::string& snapshot) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    if (!is_valid_sandbox_id(snapshot)) throw spec_error("invalid snapshot name");
    return impl_->snapshot_workspace(id, snapshot);
}

void launcher::remove_snapshot(const std::string& snapshot) {
    if (!is_valid_sandbox_id(snapshot)) throw spec_error("invalid snapshot name");
    std::error_code ec;
    fs::remove_all(impl_->snapshot_dir(snapshot), ec);
}

void launcher::create_volume(const std::string& volume, std::uint64_t bytes) {
    if (!is_valid_sandbox_id(volume)) throw spec_error("invalid volume id");
    if (bytes < (8ull << 20) || bytes > (64ull << 30)) throw spec_error("a volume has 8 MiB to 64 GiB");
    std::lock_guard lock(impl_->volumes_mutex);
    make_dir("create-volume", config_.state_dir / "volumes", 0711);
    const fs::path dir = impl_->volume_dir(volume);
    const fs::path image = dir.string() + ".img";
    if (fs::exists(image)) throw launch_error("create-volume", "volume '" + volume + "' exists", EEXIST);
    make_ext4_image(image, bytes, 0, 0, "volume");
    try {
        impl_->mounted_volume(volume);
        ::rmdir((dir / "lost+found").c_str());
    } catch (...) {
        std::error_code ec;
        fs::remove(image, ec);
        throw;
    }
}

volume_info launcher::volume_usage(const std::string& volume) {
    if (!is_valid_sandbox_id(volume)) throw spec_error("invalid volume id");
    std::lock_guard lock(impl_->volumes_mutex);
    const auto dir = impl_->mounted_volume(volume);
    struct statvfs v{};
    if (::statvfs(dir.c_str(), &v) != 0) throw launch_error("volume-usage", "statvfs " + dir.string(), errno);
    return {static_cast<std::uint64_t>(v.f_blocks) * v.f_frsize,
            static_cast<std::uint64_t>(v.f_blocks - v.f_bfree) * v.f_frsize};
}

void launcher::remove_volume(const std::string& volume) {
    if (!is_valid_sandbox_id(volume)) throw spec_error("invalid volume id");
    std::lock_guard lock(impl_->volumes_mutex);
    const fs::path dir = impl_->volume_dir(volume);
    for (const auto& m : mounts_under(dir)) unmount("remove-volume", m);
    std::error_code ec;
    fs::remove(dir, ec);
    fs::remove(dir.string() + ".img", ec);
    fs::remove(dir.string() + ".json", ec);
}

checkpoint_info launcher::checkpoint(const std::string& id) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    return impl_->checkpoint(id);
}

sandbox_info launcher::restore(const std::string& id) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    return impl_->restore(id);
}

exec_process launcher::exec(const std::string& id, const exec_spec& spec) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    validate_exec_spec(spec);
    return impl_->exec(id, spec);
}

void launcher::signal(const std::string& id, int sig) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    const auto info = impl_->read_info(id);
    if (!info) throw launch_error("signal", "no sandbox '" + id + "'", ESRCH);
    if (const auto it = impl_->runtimes.find(info->runtime);
        it != impl_->runtimes.end() && it->second->traits().signals_through_runtime) {
        // The init is not a host process: the runtime delivers the signal to it.
        if (it->second->state(id).status != "running")
            throw launch_error("signal", "sandbox '" + id + "' is not running", ESRCH);
        it->second->kill(id, sig, false);
        return;
    }
    // pidfd first, then check that this pid is still the sandbox's (its
    // cgroup names the sandbox), then signal through the pidfd: a recycled pid
    // can never receive the signal. The init forwards it to the kernel's
    // group; a kernel from the zygote has its supervisor do that.
    const auto target = info->kernel_pid > 0 ? info->kernel_pid : info->pid;
    const int pidfd = pidfd_open(target);
    if (pidfd < 0) throw launch_error("signal", "sandbox '" + id + "' is not running", errno);
    const auto cgroups = read_file("/proc/" + std::to_string(target) + "/cgroup", 8192);
    const bool ours = cgroups.find(cgroup_path_of(config_, id) + "\n") != std::string::npos ||
                      cgroups.find(cgroup_path_of(config_, id) + "/") != std::string::npos;
    int rc = -1;
    int err = ESRCH;
    if (ours) {
        rc = static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
        err = errno;
    }
    ::close(pidfd);
    if (rc != 0) throw launch_error("signal", "sandbox '" + id + "' is not running", err);
}

void launcher::set_cpu_shares(const std::string& id, std::uint32_t shares) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    if (shares < 2 || shares > 262144) throw spec_error("cpu_shares must be 2…262144");
    if (!write_cpu_shares(cgroup_path_of(config_, id), shares))
        throw launch_error("set-cpu-shares", "cannot write the cgroup of sandbox '" + id + "'", errno);
}

sandbox_usage launcher::usage(const std::string& id, bool reset_peak) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    const auto u = read_usage(cgroup_path_of(config_, id), reset_peak);
    if (!u) throw launch_error("usage", "no cgroup for sandbox '" + id + "'", ESRCH);
    return *u;
}

sandbox_status launcher::status(const std::string& id) {
    sandbox_status s;
    s.id = id;
    if (!is_valid_sandbox_id(id)) return s;
    s.info = impl_->read_info(id);
    const auto spec = s.info ? std::optional(s.info->spec) : impl_->read_spec(id);
    const std::string runtime_name = spec ? spec->runtime : "runc";
    runtime_container c;
    bool relayed = false;
    if (auto it = impl_->runtimes.find(runtime_name); it != impl_->runtimes.end()) {
        c = it->second->state(id);
        relayed = it->second->traits().relays_kernel_sockets;
    }
    // A relayed kernel whose relay is gone cannot be reached: it is as dead as
    // a stopped one (and its sandbox follows within moments).
    if (relayed && s.info && (c.status == "running" || c.status == "paused") && !relay_running(s.info->run_dir))
        c.status = "stopped";
    if (c.status == "running" || c.status == "paused")
        s.state = sandbox_state::running;
    else if (c.status == "creating" || c.status == "created")
        s.state = sandbox_state::creating;
    else if (c.status == "stopped")
        s.state = sandbox_state::stopped;
    s.pid = c.pid;
    const auto usage = read_cgroup(cgroup_path_of(config_, id));
    s.oom_killed = usage.oom_killed;
    s.memory_bytes = usage.memory_bytes;
    s.pids = usage.pids;
    return s;
}

std::vector<sandbox_status> launcher::list() {
    std::set<std::string> ids;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(impl_->sandboxes_dir(), ec)) ids.insert(e.path().filename().string());
    for (const auto& [name, rt] : impl_->runtimes)
        for (const auto& c : rt->list()) ids.insert(c.id);
    std::vector<sandbox_status> out;
    for (const auto& id : ids) out.push_back(status(id));
    return out;
}

void launcher::remove(const std::string& id, remove_options options) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    const auto spec = impl_->read_spec(id);
    std::optional<fs::path> ws;
    if (!options.keep_workspace) {
        if (spec && !spec->workspace_dir.empty())
            ws = fs::path(spec->workspace_dir);
        else if (!spec)
            // No run dir (a restart that failed removed it): the workspace, if
            // any, is the one named after the sandbox, as reap_orphans finds it.
            ws = config_.workspace_root / id;
    }
    const std::string runtime_name = spec ? spec->runtime : "runc";
    impl_->destroy(id, runtime_name, ws);
    std::error_code ec;
    fs::remove_all(impl_->paused_dir(id), ec);
}

std::vector<std::string> launcher::reap_orphans(const std::set<std::string>& keep,
                                                bool unused_workspaces) {
    std::vector<std::string> removed;
    std::set<std::string> with_run_dir;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(impl_->sandboxes_dir(), ec))
        with_run_dir.insert(e.path().filename().string());
    std::set<std::string> known;
    for (const auto& [name, rt] : impl_->runtimes) {
        for (const auto& c : rt->list()) {
            known.insert(c.id);
            if (keep.count(c.id) != 0) continue;
            const bool orphan = with_run_dir.count(c.id) == 0;
            if (orphan || c.status == "stopped") {
                try {
                    if (orphan)
                        impl_->destroy(c.id, name, std::nullopt);
                    else
                        remove(c.id);
                    removed.push_back(c.id);
                } catch (...) {
                }
            }
        }
    }
    // Run dirs whose container never started or is gone.
    for (const auto& id : with_run_dir) {
        if (known.count(id) != 0 || keep.count(id) != 0 || !is_valid_sandbox_id(id)) continue;
        try {
            remove(id);
            removed.push_back(id);
        } catch (...) {
        }
    }
    // Paused sandboxes nobody keeps: their image and workspace go.
    for (const auto& e : fs::directory_iterator(config_.state_dir / "paused", ec)) {
        const auto id = e.path().filename().string();
        if (keep.count(id) != 0 || !is_valid_sandbox_id(id) || with_run_dir.count(id) != 0) continue;
        try {
            remove(id);
            removed.push_back("paused:" + id);
        } catch (...) {
        }
    }
    // Cgroups nobody owns any more.
    for (const auto& id : cgroup_children(cgroup_parent_of(config_))) {
        // Only sandbox-shaped names: a nested instance's parent is never ours.
        if (known.count(id) != 0 || keep.count(id) != 0 || !is_valid_sandbox_id(id)) continue;
        if (remove_cgroup(cgroup_path_of(config_, id)).empty() &&
            std::find(removed.begin(), removed.end(), id) == removed.end())
            removed.push_back("cgroup:" + id);
    }
    if (unused_workspaces) {
        // Workspaces that no remaining sandbox mounts and nobody asked to keep.
        std::set<std::string> in_use;
        for (const auto& e : fs::directory_iterator(impl_->sandboxes_dir(), ec))
            if (const auto spec = impl_->read_spec(e.path().filename().string()))
                in_use.insert(fs::path(spec->workspace_dir).filename().string());
        for (const auto& e : fs::directory_iterator(config_.state_dir / "paused", ec))
            if (const auto spec = impl_->read_spec(e.path().filename().string()))
                in_use.insert(fs::path(spec->workspace_dir).filename().string());
        std::set<std::string> names;
        for (const auto& e : fs::directory_iterator(config_.workspace_root, ec)) {
            auto name = e.path().filename().string();
            if (name.size() > 4 && name.ends_with(".img")) name.resize(name.size() - 4);
            if (is_valid_sandbox_id(name)) names.insert(name);
        }
        for (const auto& name : names) {
            if (in_use.count(name) != 0 || keep.count(name) != 0) continue;
            try {
                impl_->workspaces.remove(config_.workspace_root / name);
                removed.push_back("workspace:" + name);
            } catch (...) {
            }
        }
    }
    impl_->workspaces.reap_slots();
    return removed;
}

}  // namespace cellgate::launcher
