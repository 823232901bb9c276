// Pause and resume: checkpoint saves a running sandbox's records (and its
// memory image, where the runtime can save one) in <state dir>/paused/<id>/
// and stops it; restore starts it again from that image in the run dir the
// checkpoint left as it was. The state it owns is the paused dir.

#include "cellgate/launcher/launcher.hpp"

#include "cgroups.hpp"
#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "relay_process.hpp"
#include "spec_validation.hpp"

#include <cerrno>
#include <csignal>
#include <exception>
#include <initializer_list>

namespace cellgate::launcher {
using nlohmann::json;

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

checkpoint_info launcher::checkpoint(const std::string& id) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    return impl_->checkpoint(id);
}

sandbox_info launcher::restore(const std::string& id) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    return impl_->restore(id);
}

}  // namespace cellgate::launcher
