#include "command.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

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
    if (argv.empty()) throw launch_error("run-command", "empty argv");
    int pipe_fds[2] = {-1, -1};
    if (output_fd < 0 && ::pipe2(pipe_fds, O_CLOEXEC) != 0)
        throw launch_error("run-command", "pipe for " + argv[0], errno);
    fd_closer read_end{pipe_fds[0]};
    fd_closer write_end{pipe_fds[1]};
    const int child_out = output_fd >= 0 ? output_fd : pipe_fds[1];

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, child_out, 1);
    posix_spawn_file_actions_adddup2(&actions, child_out, 2);
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
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
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw launch_error("run-command", "cannot start " + argv[0], rc);
    if (write_end.fd >= 0) {
        ::close(write_end.fd);
        write_end.fd = -1;
    }

    command_result result;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (read_end.fd >= 0) {
        char buf[8192];
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                result.timed_out = true;
                break;
            }
            pollfd p{read_end.fd, POLLIN, 0};
            const int n = ::poll(&p, 1, static_cast<int>(left.count()));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) continue;
            const ssize_t got = ::read(read_end.fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break;
            result.output.append(buf, static_cast<std::size_t>(got));
            if (result.output.size() > 2 * max_captured)
                result.output.erase(0, result.output.size() - max_captured);
        }
        if (result.output.size() > max_captured)
            result.output.erase(0, result.output.size() - max_captured);
    }

    int status = 0;
    if (result.timed_out) ::kill(pid, SIGKILL);
    for (;;) {
        const pid_t w = ::waitpid(pid, &status, result.timed_out ? 0 : WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) throw launch_error("run-command", "waitpid for " + argv[0], errno);
        if (std::chrono::steady_clock::now() >= deadline) {
            result.timed_out = true;
            ::kill(pid, SIGKILL);
            continue;
        }
        ::usleep(1000);
    }
    if (WIFEXITED(status) && !result.timed_out) result.exit_code = WEXITSTATUS(status);
    return result;
}

}  // namespace cellgate::launcher
