// One build step of a template (build_step.hpp): its parent's files, each
// lower directory mounted idmapped into a fresh uid slot so that the step's
// root owns them as the image's root does; an overlay whose upper dir
// becomes the layer; `runc run` in the foreground with a session's
// namespaces, seccomp profile and cgroup limits, a writable root, and for
// root the capabilities a package manager needs inside its user namespace;
// then the upper dir's owners shifted back from the slot to the image's ids.
#include "cellgate/launcher/build_step.hpp"

#include "command.hpp"
#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "layers.hpp"
#include "cellgate/protocol/message.hpp"
#include "spec_validation.hpp"
#include "workspace.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

namespace cellgate::launcher {

using nlohmann::json;

namespace {

constexpr const char* step = "build-step";

// What a package manager run as root needs, inside its user namespace only
// (Docker's default set less NET_RAW and MKNOD).
const std::vector<std::string> root_capabilities = {
    "CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FOWNER",           "CAP_FSETID",     "CAP_KILL",       "CAP_SETGID",
    "CAP_SETUID", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP"};

void validate_step(const build_step_spec& s, const launcher_config& cfg) {
    if (!is_valid_layer_id(s.layer)) throw spec_error("a layer id is 48 lower-case hex digits");
    if (s.argv.empty() || s.argv.size() > 256) throw spec_error("a build step has 1 to 256 arguments");
    std::size_t bytes = 0;
    for (const auto& a : s.argv) {
        if (a.find('\0') != std::string::npos) throw spec_error("an argument holds a NUL byte");
        bytes += a.size();
    }
    if (bytes > (256u << 10)) throw spec_error("a build step's arguments are larger than 256 KiB");
    if (s.uid > 65535 || s.gid > 65535) throw spec_error("a build step's uid and gid are below 65536");
    const fs::path cwd(s.cwd);
    if (s.cwd.empty() || s.cwd.size() > 4096 || !cwd.is_absolute() || s.cwd.find('\0') != std::string::npos ||
        cwd.lexically_normal() != cwd)
        throw spec_error("a build step's working directory is an absolute, normalised path");
    validate_image_env(s.env);
    validate_limits(s.limits, cfg);
    validate_egress_dir(s.egress_dir, cfg);
    if (s.timeout < std::chrono::seconds(1) || s.timeout > std::chrono::hours(24))
        throw spec_error("a build step's time limit is between 1 s and 24 h");
    if (s.disk_bytes < (64ull << 20) || s.disk_bytes > cfg.max_limits.workspace_bytes)
        throw spec_error("a build step's disk is between 64 MiB and " + std::to_string(cfg.max_limits.workspace_bytes) +
                         " bytes");
}

json step_config(const build_step_spec& s, const fs::path& rootfs, std::uint32_t host_id_base,
                 const std::string& cgroups_path) {
    oci_inputs in;
    in.rootfs = rootfs.string();
    in.egress_dir = s.egress_dir;
    in.host_id_base = host_id_base;
    in.uid = s.uid;
    in.gid = s.gid;
    in.limits = s.limits;
    in.args = s.argv;
    in.cgroups_path = cgroups_path;
    in.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              std::string("HOME=") + (s.uid == 0 ? "/root" : "/tmp"), "LANG=C.UTF-8"};
    set_environment(in.env, s.env);
    json c = build_oci_config(in);
    c["root"]["readonly"] = false;
    c["process"]["cwd"] = s.cwd;
    if (s.uid == 0)
        for (const char* set : {"bounding", "effective", "permitted"}) c["process"]["capabilities"][set] = root_capabilities;
    // No workspace and no kernel: a step writes its files into the layer.
    // /tmp stays a tmpfs (not kept) but may run what it holds, as builds do.
    json mounts = json::array();
    for (auto& m : c["mounts"]) {
        const auto dest = m["destination"].get<std::string>();
        if (dest == "/workspace" || dest == "/run/kernel") continue;
        if (dest == "/tmp") {
            json opts = json::array();
            for (const auto& o : m["options"])
                if (o != "noexec") opts.push_back(o);
            m["options"] = opts;
        }
        mounts.push_back(m);
    }
    c["mounts"] = mounts;
    c["hostname"] = "cellgate-build";
    return c;
}

}  // namespace

void to_json(json& j, const build_step_spec& s) {
    j = {{"layer", s.layer}, {"parent", s.parent}, {"argv", s.argv}, {"uid", s.uid}, {"gid", s.gid},
         {"cwd", s.cwd}, {"env", s.env}, {"limits", s.limits}, {"timeout_ms", s.timeout.count()},
         {"egress_dir", s.egress_dir}, {"disk_bytes", s.disk_bytes}};
}

void from_json(const json& j, build_step_spec& s) {
    static const std::set<std::string> known = {"layer", "parent", "argv", "uid", "gid", "cwd",
                                                "env", "limits", "timeout_ms", "egress_dir", "disk_bytes"};
    if (!j.is_object()) throw spec_error("a build step is a JSON object");
    for (const auto& [key, value] : j.items())
        if (known.count(key) == 0) throw spec_error("a build step has no field '" + key.substr(0, 64) + "'");
    try {
        s.layer = j.at("layer").get<std::string>();
        s.parent = j.at("parent").get<std::string>();
        s.argv = j.at("argv").get<std::vector<std::string>>();
        s.uid = j.value("uid", 0u);
        s.gid = j.value("gid", 0u);
        s.cwd = j.value("cwd", std::string("/"));
        s.env = j.value("env", std::map<std::string, std::string>{});
        if (j.contains("limits")) s.limits = j.at("limits").get<sandbox_limits>();
        s.timeout = std::chrono::milliseconds(j.value("timeout_ms", std::int64_t{600000}));
        s.egress_dir = j.value("egress_dir", std::string());
        s.disk_bytes = j.value("disk_bytes", std::uint64_t{8} << 30);
    } catch (const nlohmann::json::exception& e) {
        throw spec_error(std::string("a build step's fields have the wrong types: ") + e.what());
    }
}

void to_json(json& j, const build_step_result& r) {
    j = {{"exit_code", r.exit_code}, {"timed_out", r.timed_out}, {"output", r.output},
         {"layer_bytes", r.layer_bytes}, {"ms", r.ms}};
}

void from_json(const json& j, build_step_result& r) {
    r.exit_code = j.value("exit_code", -1);
    r.timed_out = j.value("timed_out", false);
    r.output = j.value("output", std::string());
    r.layer_bytes = j.value("layer_bytes", std::uint64_t{0});
    r.ms = j.value("ms", 0.0);
}

build_step_result launcher::impl::run_build_step(const build_step_spec& s) {
    const auto t0 = clock_type::now();
    validate_step(s, cfg);
    if (!s.egress_dir.empty()) {
        sandbox_spec probe;
        probe.egress_dir = s.egress_dir;
        check_egress_dir(probe);
    }
    const auto lowers = layer_lowers(s.parent, cfg);
    if (lowers.size() > max_layer_depth) throw spec_error("a template stacks at most 64 layers");
    const fs::path store = new_layer_store(s.layer, cfg, step);
    std::error_code ec;

    const std::string id = "b-" + s.layer.substr(0, 12) + "-" + random_hex(8);
    const fs::path tmp = store / (".tmp-" + id);
    const fs::path dir = cfg.state_dir / "builds" / id;
    const fs::path slot = cfg.workspace_root / id;
    const std::string runc_root = (cfg.state_dir / "runc-build").string();
    const fs::path scratch_image = store / (".tmp-" + id + ".img");
    bool container = false;
    teardown_guard guard;  // after what its undo step reads, so it runs before they go
    guard.add([&] {
        if (container) {
            run_command({cfg.runc_path, "--root", runc_root, "delete", "--force", id}, std::chrono::seconds(30));
        }
        for (const auto& m : mounts_under(dir)) unmount("teardown", m);
        fs::remove_all(dir, ec);
        fs::remove_all(tmp, ec);
        fs::remove(scratch_image, ec);
        workspaces.remove(slot);
    });

    fs::create_directories(dir.parent_path(), ec);
    make_dir(step, dir, 0711, true);
    // The config and the step's output, on a tmpfs of their own: what the
    // step prints cannot fill the host.
    mount_tmpfs(step, dir, 16ull << 20, 0711);
    const std::uint32_t base = workspaces.host_id_base(slot);
    make_dir(step, tmp, 0700, true);
    // What the step writes lands on a file system of its own, of
    // spec.disk_bytes: past it the step gets ENOSPC, and the host's disk
    // never holds more (the layer is copied out of it once the step is done).
    const fs::path scratch = dir / "scratch";
    make_dir(step, scratch, 0700);
    make_ext4_image(scratch_image, s.disk_bytes, 0, 0, "build");
    const auto mounted = run_command({"mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", scratch_image.string(),
                                      scratch.string()},
                                     std::chrono::seconds(30));
    if (mounted.exit_code != 0) throw launch_error(step, "mounting the step's scratch file system: " + mounted.output);
    make_dir(step, scratch / "diff", 0755);
    change_owner(step, scratch / "diff", base, base, 0755, S_IFDIR);
    make_dir(step, scratch / "work", 0700);

    std::string lowerdir;
    for (std::size_t i = 0; i < lowers.size(); ++i) {
        const fs::path at = dir / ("l" + std::to_string(i));
        mount_idmapped(lowers[i], at, base);
        lowerdir += (i ? ":" : "") + at.string();
    }
    const fs::path rootfs = dir / "rootfs";
    make_dir(step, rootfs, 0755);
    const std::string options = "lowerdir=" + lowerdir + ",upperdir=" + (scratch / "diff").string() +
                                ",workdir=" + (scratch / "work").string() + ",redirect_dir=off,index=off,metacopy=off";
    if (::mount("overlay", rootfs.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
        throw launch_error(step, "mounting the step's root", errno);
    // In a session /workspace (E2B's /home/user) is the kernel's user's own
    // file system; in a build it is the user's as well, so a step run as the
    // user can write there what each session then starts with.
    {
        struct stat st {};
        const auto ws = rootfs / "workspace";
        if (::lstat(ws.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid != base + 1000 &&
            ::lchown(ws.c_str(), base + 1000, base + 1000) != 0)
            throw launch_error(step, "giving /workspace to the kernel's user", errno);
    }

    write_file(step, dir / "config.json", step_config(s, rootfs, base, cgroup_path_of(cfg, id)).dump(), 0600);
    const unique_fd log(::open((dir / "output.log").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!log) throw launch_error(step, "creating the step's log", errno);
    container = true;
    const auto run = run_command({cfg.runc_path, "--root", runc_root, "run", "--bundle", dir.string(), id}, s.timeout,
                                 log.get());
    build_step_result out;
    out.timed_out = run.timed_out;
    out.exit_code = run.timed_out ? -1 : run.exit_code;
    if (run.timed_out)
        run_command({cfg.runc_path, "--root", runc_root, "kill", id, "KILL"}, std::chrono::seconds(10));
    run_command({cfg.runc_path, "--root", runc_root, "delete", "--force", id}, std::chrono::seconds(30));
    container = false;
    out.output = read_tail(dir / "output.log", 64u << 10);
    for (const auto& m : mounts_under(dir / "rootfs")) unmount(step, m);
    for (std::size_t i = 0; i < lowers.size(); ++i) unmount(step, dir / ("l" + std::to_string(i)));

    if (out.exit_code == 0) {
        // The step's files were made by ids of the slot; a layer keeps the
        // image's own, so any later step or session maps them afresh.
        remap_owners(scratch / "diff", base, 0);
        // Everything as overlayfs left it: owners, modes, hard links,
        // whiteouts (character devices) and its opaque-directory xattrs.
        const auto copied = run_command({"cp", "-a", "--no-target-directory", (scratch / "diff").string(),
                                         (tmp / "diff").string()},
                                        std::chrono::minutes(30));
        if (copied.exit_code != 0) throw launch_error(step, "copying the layer out of the step: " + copied.output);
        const auto parent = s.parent.starts_with("l-") ? "layer " + s.parent.substr(2)
                                                        : "image " + lowers.back().string();
        out.layer_bytes = seal_layer(tmp, s.layer, parent, cfg, step);
    }
    out.ms = ms_since(t0);
    return out;  // the guard removes the step's dir, what is left of tmp, and frees the slot
}

build_step_result launcher::run_build_step(const build_step_spec& spec) { return impl_->run_build_step(spec); }

void launcher::remove_layer(const std::string& id) {
    if (!is_valid_layer_id(id)) throw spec_error("a layer id is 48 lower-case hex digits");
    const fs::path dir = layers_dir(config_) / id;
    for (const auto& m : mounts_under(dir)) unmount("remove-layer", m);
    const fs::path doomed = layers_dir(config_) / (".del-" + id + "-" + random_hex(8));
    if (::rename(dir.c_str(), doomed.c_str()) != 0) {
        if (errno == ENOENT) return;
        throw launch_error("remove-layer", "renaming layer " + id, errno);
    }
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (ec) throw launch_error("remove-layer", "removing layer " + id + ": " + ec.message(), ec.value());
}

}  // namespace cellgate::launcher
