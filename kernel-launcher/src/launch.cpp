// The launch sequence: from a spec to a kernel that answers, in the order
// launch() runs it (run dir, workspace, kernel dir and connection files, OCI
// config, relay and container, a kernel forked from the zygote where one
// fits, the wait until it serves). The state it owns is the sandbox under
// construction: its run dir and the teardown guard that removes it when a
// step fails; and the seccomp filter read for zygote forks. Restore
// (checkpoint.cpp) reuses start_container and wait_until_serving.

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/launcher.hpp"

#include "cellgate/protocol/hmac_signer.hpp"
#include "cellgate/protocol/message.hpp"
#include "cgroups.hpp"
#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "relay_process.hpp"
#include "spec_validation.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

namespace cellgate::launcher {
using nlohmann::json;

namespace {

json connection_json(const std::string& ip, const std::string& key) {
    return {{"transport", "ipc"},       {"ip", ip},           {"shell_port", 1},
            {"iopub_port", 2},          {"stdin_port", 3},    {"control_port", 4},
            {"hb_port", 5},             {"key", key},         {"signature_scheme", "hmac-sha256"},
            {"kernel_name", "python3"}};
}

// What runs between tini and the kernel when a template has a start
// command or ready check (sandbox_spec): the commands come in the
// environment, so no quoting is needed; the start command gets a session
// of its own (an interrupt of the kernel does not reach it) and its output
// goes to /tmp/.cellgate-start.log; the check is tried every 200 ms for
// `seconds`, and a check that never passes ends the sandbox with the log's
// tail, which the launcher's start failure reports.
std::string start_script(std::int64_t seconds) {
    return R"SH(dir=$CELLGATE_START_DIR; start=$CELLGATE_START_CMD; ready=$CELLGATE_READY_CMD
unset CELLGATE_START_DIR CELLGATE_START_CMD CELLGATE_READY_CMD
mkdir -p "$dir" 2>/dev/null
if [ -n "$start" ]; then
  (cd "$dir" 2>/dev/null || cd /; exec setsid /bin/sh -c "$start" </dev/null >>/tmp/.cellgate-start.log 2>&1) &
fi
if [ -n "$ready" ]; then
  deadline=$(( $(date +%s) + )SH" + std::to_string(seconds) + R"SH( ))
  until (cd "$dir" 2>/dev/null || cd /; exec /bin/sh -c "$ready") </dev/null >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo ")SH" + std::string(ready_check_failed) + R"SH( in )SH" + std::to_string(seconds) + R"SH( s: $ready" >&2
      tail -n 20 /tmp/.cellgate-start.log >&2 2>/dev/null
      exit 1
    fi
    sleep 0.2
  done
fi
exec "$@"
)SH";
}

}  // namespace

bool launcher::impl::forks_from_zygote(const sandbox_spec& spec, const oci_runtime& rt, const sandbox_info& info) {
    if (!cfg.zygote || rt.name() != "runc" || info.memory_merge || spec.limits.cpu_millis > 1000) return false;
    // A template's start command runs in the sandbox before its kernel; a
    // forked kernel has no such place to wait in.
    if (!spec.start_cmd.empty() || !spec.ready_cmd.empty()) return false;
    {
        const std::lock_guard lock(filters_mutex);
        if (filters_unreadable) return false;
    }
    // What the zygote's imports were made under must hold for the kernel too
    // (a template's environment counts as much as the caller's).
    // The zygote is a Python kernel's: a kernelspec that starts another
    // language's kernel (SANDBOX_KERNEL, images/languages) starts cold.
    for (const auto* env : {&spec.env, &spec.image_env})
        for (const auto& [name, value] : *env)
            if ((name == "SANDBOX_KERNEL" && value != "python") || name == "PYTHONHASHSEED" || name == "MPLBACKEND" ||
                name.ends_with("_NUM_THREADS") || name == "NUMEXPR_MAX_THREADS" || name.starts_with("PYTHON"))
                return false;
    return zygote_processes.ready(info.image);
}

std::int64_t launcher::impl::fork_kernel(const sandbox_info& info, const oci_inputs& in, const fs::path& dir) {
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

std::string launcher::impl::liveness(int pidfd, const std::string& id, bool relayed) const {
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

kernel_endpoints launcher::impl::write_connection_files(const fs::path& dir, const fs::path& kernel_dir,
                                                        const fs::path& socket_dir, std::uint32_t kernel_uid,
                                                        std::uint32_t kernel_gid) const {
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

oci_inputs launcher::impl::oci_inputs_for(const sandbox_info& info, const sandbox_spec& spec,
                                          const fs::path& kernel_dir, std::uint32_t host_id_base,
                                          const oci_runtime& rt) const {
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
    if (!spec.start_cmd.empty() || !spec.ready_cmd.empty()) {
        // tini, then the start command and its check, then the kernel as before.
        const auto after_tini = std::find(in.args.begin(), in.args.end(), "--") + 1;
        const auto seconds = std::max<std::int64_t>(1, (spec.start_timeout.count() - 3000) / 1000);
        const std::vector<std::string> wrap = {"/bin/sh", "-c", start_script(seconds), "cellgate-start"};
        in.args.insert(after_tini, wrap.begin(), wrap.end());
    }
    if (rt.name() == "runsc")
        in.gvisor = oci_inputs::gvisor_inputs{relay_paths_of(fs::path(info.run_dir)).script_dir.string()};
    in.env = base_environment(spec.limits);
    set_environment(in.env, spec.image_env);
    set_environment(in.env, spec.env);
    if (info.memory_merge) {
        // The entry point opts into KSM; a fixed string hash seed lays out
        // the imports' dicts alike in every kernel (a caller's seed stands).
        in.env.push_back("CELLGATE_MEMORY_MERGE=1");
        if (!spec.env.contains("PYTHONHASHSEED")) in.env.push_back("PYTHONHASHSEED=0");
    }
    if (!spec.start_cmd.empty()) in.env.push_back("CELLGATE_START_CMD=" + spec.start_cmd);
    if (!spec.ready_cmd.empty()) in.env.push_back("CELLGATE_READY_CMD=" + spec.ready_cmd);
    if (!spec.start_cmd.empty() || !spec.ready_cmd.empty())
        in.env.push_back("CELLGATE_START_DIR=" + (spec.start_dir.empty() ? std::string("/workspace") : spec.start_dir));
    if (!spec.preload.empty()) {
        std::string modules;
        for (const auto& m : spec.preload) modules += (modules.empty() ? "" : ",") + m;
        in.env.push_back("CELLGATE_PRELOAD=" + modules);
    }
    in.cgroups_path = cgroup_path_of(cfg, info.id);
    return in;
}

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
    // A new session's workspace starts with what its image (a template) holds there.
    if (ws.created && !seed) copy_image_workspace(fs::path(info.image) / "workspace", ws_dir, ws.host_id_base);
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

}  // namespace cellgate::launcher
