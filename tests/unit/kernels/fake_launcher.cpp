#include "fake_launcher.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>

namespace cellgate::fakes {

namespace {

// The sandbox's init, as far as the gateway can tell: a process that lives
// until killed. The child of a multi-threaded parent may only make system
// calls, so it does nothing else. It dies with the thread that forked it (a
// launch thread of the manager), so a test that crashes leaves none behind.
std::int64_t fork_init() {
    const pid_t pid = ::fork();
    if (pid < 0) throw launcher::launch_error("runtime-run", "fork failed", errno);
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;) ::pause();
    }
    return pid;
}

}  // namespace

fake_launcher::fake_launcher(std::filesystem::path dir) : dir_(std::move(dir)) {}

fake_launcher::~fake_launcher() {
    std::lock_guard lock(mutex_);
    while (!sandboxes_.empty()) remove_locked(sandboxes_.begin()->first);
}

void fake_launcher::hold_launches() {
    std::lock_guard lock(mutex_);
    hold_ = true;
}

void fake_launcher::release_launches() {
    {
        std::lock_guard lock(mutex_);
        hold_ = false;
    }
    released_.notify_all();
}

int fake_launcher::held() const {
    std::lock_guard lock(mutex_);
    return held_;
}

launcher::sandbox_info fake_launcher::launch(const launcher::sandbox_spec& spec) {
    std::unique_lock lock(mutex_);
    ++held_;
    released_.wait(lock, [this] { return !hold_; });
    --held_;
    calls_.emplace_back(spec.id, "launch");
    launched_.push_back(spec);
    if (failures_ > 0) {
        --failures_;
        if (refuse_) throw launcher::spec_error("image 'nowhere' is not in the image store");
        throw launcher::launch_error("runtime-run", "the fake runtime failed on purpose");
    }
    // As the runtime refuses a second container of one id: a launch before
    // the remove of the sandbox it replaces is the manager's bug.
    if (sandboxes_.count(spec.id) != 0) throw launcher::launch_error("runtime-run", "sandbox " + spec.id + " exists");
    auto& s = sandboxes_[spec.id];
    s.kernel = std::make_unique<fake_kernel>(dir_ / spec.id, std::exchange(mute_next_, false));
    s.pid = fork_init();
    launcher::sandbox_info info;
    info.id = spec.id;
    info.image = spec.image;
    info.runtime = spec.runtime;
    info.run_dir = (dir_ / spec.id).string();
    info.workspace_dir = (dir_ / "workspaces" / spec.id).string();
    info.pid = s.pid;
    info.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    info.spec = spec;
    info.endpoints = s.kernel->endpoints();
    return info;
}

void fake_launcher::signal(const std::string& id, int signal) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(id, "signal " + std::to_string(signal));
    const auto it = sandboxes_.find(id);
    if (it == sandboxes_.end() || it->second.killed)
        throw launcher::launch_error("signal", "no running sandbox " + id, ESRCH);
}

launcher::sandbox_status fake_launcher::status(const std::string& id) {
    std::lock_guard lock(mutex_);
    launcher::sandbox_status st;
    st.id = id;
    st.oom_killed = oom_;
    if (const auto it = sandboxes_.find(id); it != sandboxes_.end()) {
        st.state = it->second.killed ? launcher::sandbox_state::stopped : launcher::sandbox_state::running;
        st.pid = it->second.pid;
    }
    return st;
}

void fake_launcher::set_cpu_shares(const std::string&, std::uint32_t) {}

launcher::sandbox_usage fake_launcher::usage(const std::string&, bool) { return {}; }

std::vector<launcher::sandbox_status> fake_launcher::list() {
    std::vector<std::string> ids;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [id, s] : sandboxes_) ids.push_back(id);
    }
    std::vector<launcher::sandbox_status> out;
    for (const auto& id : ids) out.push_back(status(id));
    return out;
}

void fake_launcher::remove(const std::string& id, launcher::remove_options options) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(id, options.keep_workspace ? "remove keep_workspace" : "remove");
    remove_locked(id);
}

void fake_launcher::remove_locked(const std::string& id) {
    const auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return;
    it->second.kernel->stop();
    ::kill(static_cast<pid_t>(it->second.pid), SIGKILL);
    ::waitpid(static_cast<pid_t>(it->second.pid), nullptr, 0);
    sandboxes_.erase(it);
}

std::vector<std::string> fake_launcher::reap_orphans(const std::set<std::string>&, bool) { return {}; }

void fake_launcher::validate(const launcher::sandbox_spec&) const {}

void fake_launcher::fail_launches(int n, bool refused) {
    std::lock_guard lock(mutex_);
    failures_ = n;
    refuse_ = refused;
}

void fake_launcher::mute_next_launch() {
    std::lock_guard lock(mutex_);
    mute_next_ = true;
}

void fake_launcher::report_oom(bool on) {
    std::lock_guard lock(mutex_);
    oom_ = on;
}

void fake_launcher::kill_kernel(const std::string& id) {
    std::lock_guard lock(mutex_);
    const auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return;
    it->second.kernel->stop();
    ::kill(static_cast<pid_t>(it->second.pid), SIGKILL);
    it->second.killed = true;
}

void fake_launcher::stop_heartbeat(const std::string& id) {
    std::lock_guard lock(mutex_);
    if (const auto it = sandboxes_.find(id); it != sandboxes_.end()) it->second.kernel->stop_heartbeat();
}

std::vector<std::string> fake_launcher::calls(const std::string& id) const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [i, c] : calls_)
        if (i == id) out.push_back(c);
    return out;
}

int fake_launcher::count(const std::string& call) const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(
        std::count_if(calls_.begin(), calls_.end(), [&](const auto& c) { return c.second == call; }));
}

std::vector<launcher::sandbox_spec> fake_launcher::launched() const {
    std::lock_guard lock(mutex_);
    return launched_;
}

std::int64_t fake_launcher::pid_of(const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = sandboxes_.find(id);
    return it == sandboxes_.end() ? 0 : it->second.pid;
}

std::size_t fake_launcher::sandboxes() const {
    std::lock_guard lock(mutex_);
    return sandboxes_.size();
}

launcher::checkpoint_info fake_launcher::checkpoint(const std::string& id) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(id, "checkpoint");
    if (sandboxes_.count(id) == 0) throw launcher::launch_error("checkpoint", "no sandbox '" + id + "'", ESRCH);
    remove_locked(id);
    return {};
}

launcher::sandbox_info fake_launcher::restore(const std::string& id) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(id, "restore");
    throw launcher::launch_error("restore", "sandbox '" + id + "' has no saved memory to restore", ENOENT);
}

launcher::snapshot_info fake_launcher::snapshot_workspace(const std::string& id, const std::string& snapshot) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(id, "snapshot " + snapshot);
    return {};
}

void fake_launcher::remove_snapshot(const std::string& snapshot) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(snapshot, "remove_snapshot");
}

void fake_launcher::create_volume(const std::string& volume, std::uint64_t) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(volume, "create_volume");
}

launcher::volume_info fake_launcher::volume_usage(const std::string& volume) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(volume, "volume_usage");
    return {};
}

void fake_launcher::remove_volume(const std::string& volume) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(volume, "remove_volume");
}

launcher::build_step_result fake_launcher::run_build_step(const launcher::build_step_spec& spec) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(spec.layer, "build_step");
    throw launcher::launch_error("build-step", "the fake launcher builds no layers");
}

launcher::exec_process fake_launcher::exec(const std::string& id, const launcher::exec_spec&) {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(id, "exec");
    throw launcher::launch_error("exec", "the fake launcher runs no processes in its sandboxes");
}

}  // namespace cellgate::fakes
