// The launcher itself: its construction (the runtimes, the node's settings,
// the short socket root a deep state dir needs), the records each sandbox
// keeps in its run dir (info.json, spec.json), spec validation, and the verbs
// that look at or act on a running sandbox through its runtime and cgroup
// (signal, CPU shares, usage, status, list). Starting, pausing, exec and
// removal live in the files named in launcher_internal.hpp.

#include "cellgate/launcher/launcher.hpp"

#include "cellgate/launcher/node_settings.hpp"
#include "cgroups.hpp"
#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "relay_process.hpp"
#include "spec_validation.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <set>

namespace cellgate::launcher {
using nlohmann::json;

namespace {

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

}  // namespace

launcher::impl::impl(launcher_config c, std::map<std::string, std::unique_ptr<oci_runtime>> r)
    : cfg(std::move(c)), runtimes(std::move(r)),
      workspaces(cfg.workspace_root, cfg.host_id_base, cfg.max_slots), zygote_processes(cfg.state_dir),
      socket_root(socket_root_for(cfg.state_dir)) {}

void launcher::impl::ensure_socket_root() const {
    if (socket_root != cfg.state_dir)  // a failed attempt is tried again by the next start
        std::call_once(socket_root_made, [this] { make_socket_root(cfg.state_dir, socket_root); });
}

std::optional<sandbox_info> launcher::impl::read_info(const std::string& id) const {
    const auto text = read_file(run_dir(id) / "info.json");
    if (text.empty()) return std::nullopt;
    try {
        return sandbox_info_from_json(json::parse(text));
    } catch (...) {
        return std::nullopt;
    }
}

std::optional<sandbox_spec> launcher::impl::read_spec(const std::string& id) const {
    auto text = read_file(run_dir(id) / "spec.json");
    if (text.empty()) text = read_file(paused_dir(id) / "spec.json");  // a paused sandbox's
    if (text.empty()) return std::nullopt;
    try {
        return json::parse(text).get<sandbox_spec>();
    } catch (...) {
        return std::nullopt;
    }
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

}  // namespace cellgate::launcher
