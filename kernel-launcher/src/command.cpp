#include "command.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/oci_runtime.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

extern char** environ;

namespace cellgate::launcher {

namespace {

constexpr std::size_t max_captured = 64 << 10;

struct fd_closer {
    int fd = -1;
    ~fd_closer() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

command_result run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                           int output_fd) {
    command_fds fds;
    fds.stderr_fd = output_fd;
    return run_command(argv, timeout, fds);
}

namespace {

// Starts argv[0] (PATH search) with `fds` as its stdin, stdout, stderr and
// 3…, every other descriptor closed, signals unblocked and at their
// defaults. `child_out` is where stdout and stderr go when not given.
pid_t spawn(const std::vector<std::string>& argv, const command_fds& fds, int child_out) {
    // Every descriptor the child gets is first copied above any target number,
    // so one dup2 cannot overwrite the source of the next.
    struct copies_closer {
        std::vector<int> fds;
        void close_all() {
            for (const int fd : fds) ::close(fd);
            fds.clear();
        }
        ~copies_closer() { close_all(); }
    } copies;
    auto high_copy = [&](int fd) {
        const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 64);
        if (copy < 0) throw launch_error("run-command", "dup for " + argv[0], errno);
        copies.fds.push_back(copy);
        return copy;
    };
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    struct actions_guard {
        posix_spawn_file_actions_t* a;
        ~actions_guard() { posix_spawn_file_actions_destroy(a); }
    } actions_cleanup{&actions};
    const int in = fds.stdin_fd >= 0 ? high_copy(fds.stdin_fd) : -1;
    const int out = high_copy(fds.stdout_fd >= 0 ? fds.stdout_fd : child_out);
    const int err = high_copy(child_out);
    std::vector<int> extra;
    for (const int fd : fds.extra_fds) extra.push_back(high_copy(fd));
    if (in >= 0)
        posix_spawn_file_actions_adddup2(&actions, in, 0);
    else
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out, 1);
    posix_spawn_file_actions_adddup2(&actions, err, 2);
    for (std::size_t i = 0; i < extra.size(); ++i)
        posix_spawn_file_actions_adddup2(&actions, extra[i], static_cast<int>(3 + i));
    posix_spawn_file_actions_addclosefrom_np(&actions, static_cast<int>(3 + extra.size()));
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t no_signals, default_signals;
    sigemptyset(&no_signals);
    sigfillset(&default_signals);
    posix_spawnattr_setsigmask(&attr, &no_signals);
    posix_spawnattr_setsigdefault(&attr, &default_signals);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw launch_error("run-command", "cannot start " + argv[0], rc);
    return pid;
}

// Reads the child's output until it closes it or the deadline passes,
// keeping the last max_captured bytes.
void capture(int read_fd, std::chrono::steady_clock::time_point deadline, command_result& result) {
    char buf[8192];
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            result.timed_out = true;
            break;
        }
        pollfd p{read_fd, POLLIN, 0};
        const int n = ::poll(&p, 1, static_cast<int>(left.count()));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) continue;
        const ssize_t got = ::read(read_fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        result.output.append(buf, static_cast<std::size_t>(got));
        if (result.output.size() > 2 * max_captured) result.output.erase(0, result.output.size() - max_captured);
    }
    if (result.output.size() > max_captured) result.output.erase(0, result.output.size() - max_captured);
}

// Waits for the child, killing it once the deadline has passed.
void reap(pid_t pid, const std::string& name, std::chrono::steady_clock::time_point deadline,
          command_result& result) {
    int status = 0;
    if (result.timed_out) ::kill(pid, SIGKILL);
    for (;;) {
        const pid_t w = ::waitpid(pid, &status, result.timed_out ? 0 : WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) throw launch_error("run-command", "waitpid for " + name, errno);
        if (std::chrono::steady_clock::now() >= deadline) {
            result.timed_out = true;
            ::kill(pid, SIGKILL);
            continue;
        }
        ::usleep(1000);
    }
    if (WIFEXITED(status) && !result.timed_out) result.exit_code = WEXITSTATUS(status);
}

}  // namespace

command_result run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                           const command_fds& fds) {
    if (argv.empty()) throw launch_error("run-command", "empty argv");
    const int output_fd = fds.stderr_fd;
    int pipe_fds[2] = {-1, -1};
    if (output_fd < 0 && ::pipe2(pipe_fds, O_CLOEXEC) != 0)
        throw launch_error("run-command", "pipe for " + argv[0], errno);
    fd_closer read_end{pipe_fds[0]};
    fd_closer write_end{pipe_fds[1]};
    const pid_t pid = spawn(argv, fds, output_fd >= 0 ? output_fd : pipe_fds[1]);
    if (write_end.fd >= 0) {
        ::close(write_end.fd);
        write_end.fd = -1;
    }
    command_result result;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (read_end.fd >= 0) capture(read_end.fd, deadline, result);
    reap(pid, argv[0], deadline, result);
    return result;
}

std::string find_executable(const std::string& program) {
    if (program.empty()) return {};
    auto usable = [](const std::string& p) { return ::access(p.c_str(), X_OK) == 0; };
    if (program.find('/') != std::string::npos) return usable(program) ? program : std::string();
    const char* path = std::getenv("PATH");
    std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
        const auto end = std::min(dirs.find(':', start), dirs.size());
        const auto dir = dirs.substr(start, end - start);
        if (!dir.empty() && usable(dir + "/" + program)) return dir + "/" + program;
        start = end + 1;
    }
    return {};
}

}  // namespace cellgate::launcher
