#include "relay_process.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/oci_runtime.hpp"
#include "command.hpp"
#include "host_fs.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <thread>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

constexpr auto relay_start_timeout = std::chrono::seconds(10);

struct fd_closer {
    int fd = -1;
    ~fd_closer() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

relay_paths relay_paths_of(const fs::path& run_dir) {
    return {run_dir / "relay", run_dir / "relay.lock", run_dir / "relay.pid", run_dir / "relay.log",
            run_dir / "relay-script"};
}

relay_pipes::~relay_pipes() {
    if (sandbox_stdin >= 0) ::close(sandbox_stdin);
    if (sandbox_stdout >= 0) ::close(sandbox_stdout);
}

void start_relay(const std::string& relay_binary, const fs::path& run_dir, std::uint32_t uid, std::uint32_t gid,
                 relay_pipes& pipes, bool resumed) {
    const auto p = relay_paths_of(run_dir);
    make_dir("start-relay", p.script_dir, 0755);
    // A restored sandbox still has the script it started with open, and gVisor
    // restores its mounts only onto the very same files: it stays as it is.
    if (!resumed) write_file("start-relay", p.script_dir / "cellgate-relay.py", std::string(sandbox_relay_source()), 0444);
    make_dir("start-relay", p.socket_dir, 0750);
    change_owner("start-relay", p.socket_dir, uid, gid, 0750);
    write_file("start-relay", p.lock, "", 0600);

    int to_sandbox[2] = {-1, -1};
    int from_sandbox[2] = {-1, -1};
    if (::pipe2(to_sandbox, O_CLOEXEC) != 0) throw launch_error("start-relay", "pipe", errno);
    fd_closer to_read{to_sandbox[0]}, to_write{to_sandbox[1]};
    if (::pipe2(from_sandbox, O_CLOEXEC) != 0) throw launch_error("start-relay", "pipe", errno);
    fd_closer from_read{from_sandbox[0]}, from_write{from_sandbox[1]};
    fd_closer log{::open(p.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600)};
    if (log.fd < 0) throw launch_error("start-relay", "open " + p.log.string(), errno);

    command_fds fds;
    fds.stdout_fd = log.fd;
    fds.stderr_fd = log.fd;
    fds.extra_fds = {from_sandbox[0], to_sandbox[1]};  // 3 and 4 in the relay
    std::vector<std::string> argv = {relay_binary, "--socket-dir", p.socket_dir.string(), "--lock", p.lock.string(),
                                     "--pid-file", p.pid_file.string(), "--uid", std::to_string(uid), "--gid",
                                     std::to_string(gid)};
    if (resumed) {
        argv.push_back("--resumed");
        argv.push_back("1");
    }
    const auto r = run_command(argv, relay_start_timeout, fds);
    if (r.timed_out) throw launch_error("start-relay", "cellgate-relay did not start in time", ETIMEDOUT);
    if (r.exit_code != 0)
        throw launch_error("start-relay", "cellgate-relay exited " + std::to_string(r.exit_code) + ": " +
                                              read_tail(p.log, 1024));
    pipes.sandbox_stdin = to_sandbox[0];
    pipes.sandbox_stdout = from_sandbox[1];
    to_read.fd = -1;
    from_write.fd = -1;
}

bool relay_running(const fs::path& run_dir) {
    const fd_closer lock{::open(relay_paths_of(run_dir).lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
    if (lock.fd < 0) return false;
    if (::flock(lock.fd, LOCK_SH | LOCK_NB) != 0) return errno == EWOULDBLOCK;
    ::flock(lock.fd, LOCK_UN);
    return false;
}

void stop_relay(const fs::path& run_dir, std::chrono::milliseconds grace) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (relay_running(run_dir)) {
        if (std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!relay_running(run_dir)) return;
    std::int64_t pid = 0;
    try {
        pid = std::stoll(read_file(relay_paths_of(run_dir).pid_file, 32));
    } catch (...) {
        throw launch_error("stop-relay", "the relay runs but its pid file is unreadable", ESRCH);
    }
    // pidfd first, then the lock: while the lock is held the pid is still the
    // relay's, so the pidfd cannot name a recycled process.
    const fd_closer pidfd{pidfd_open(pid)};
    if (pidfd.fd < 0 || !relay_running(run_dir)) return;
    if (::syscall(SYS_pidfd_send_signal, pidfd.fd, SIGKILL, nullptr, 0) != 0)
        throw launch_error("stop-relay", "kill the relay", errno);
    pollfd pfd{pidfd.fd, POLLIN, 0};
    ::poll(&pfd, 1, 1000);
}

std::string find_relay_binary(const std::string& configured) {
    if (!configured.empty()) return find_executable(configured);
    std::error_code ec;
    const auto self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const auto sibling = self.parent_path() / "cellgate-relay";
        if (::access(sibling.c_str(), X_OK) == 0) return sibling.string();
    }
    return find_executable("cellgate-relay");
}

}  // namespace cellgate::launcher
