// cellgate-exec-shim: watches one process that the launcher runs inside a
// sandbox with `runc exec` / `runsc exec` (src/exec_shim.hpp has the
// protocol). Descriptor 3 is its socket to the launcher, 4–6 the process's
// stdin, stdout and stderr. It daemonises at once, runs the runtime's detached
// exec as a child subreaper, so the orphaned process (or runsc's waiter for
// it) becomes its child, then forwards signals, reports the exit and ends.
// When the socket closes first it kills the process (SIGKILL) and ends. It is
// started by the launcher, not by people.
#include "cellgate/launcher/exec_spec.hpp"
#include "command.hpp"
#include "exec_shim.hpp"
#include "exec_wire.hpp"
#include "host_fs.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <string>

namespace {

using namespace cellgate::launcher;
using clock_type = std::chrono::steady_clock;

constexpr auto signal_command_timeout = std::chrono::seconds(10);
// After the handle is gone: how long a SIGKILLed process may take to be reaped
// before the kill is repeated, and before the shim gives up on it.
constexpr auto kill_retry_after = std::chrono::seconds(5);
constexpr auto kill_give_up_after = std::chrono::seconds(20);

void send_line(const std::string& line) {
    for (std::size_t done = 0; done < line.size();) {
        const auto n = ::send(shim_control_fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // the launcher is gone; nobody to tell
        done += static_cast<std::size_t>(n);
    }
}

std::optional<std::string> read_request() {
    line_buffer in(max_shim_request_bytes);
    const auto deadline = clock_type::now() + std::chrono::seconds(10);
    for (;;) {
        if (auto line = in.pop()) return line;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
        pollfd p{shim_control_fd, POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
        char buf[16384];
        const auto n = ::recv(shim_control_fd, buf, sizeof buf, 0);
        if (n <= 0 || !in.append({buf, static_cast<std::size_t>(n)})) return std::nullopt;
    }
}

std::optional<pid_t> read_pid(const std::string& path) {
    std::ifstream in(path);
    long long pid = 0;
    if (!(in >> pid) || pid <= 1 || pid > 0x3fffffff) return std::nullopt;
    return static_cast<pid_t>(pid);
}

class supervisor {
public:
    explicit supervisor(shim_request r) : r_(std::move(r)) {}

    // Runs the runtime's start command; true once the process runs.
    bool start() {
        command_fds fds;
        fds.stdin_fd = shim_stdin_fd;
        fds.stdout_fd = shim_stdout_fd;
        fds.stderr_fd = shim_stderr_fd;
        const auto result = run_command(r_.command.start, r_.start_timeout, fds);
        // The process has its own copies now: holding ours would keep its
        // stdout open past its end.
        for (const int fd : {shim_stdin_fd, shim_stdout_fd, shim_stderr_fd}) ::close(fd);
        const auto pid = read_pid(r_.command.pid_file);
        if (result.exit_code != 0 || !pid) {
            if (pid && is_child(*pid)) ::kill(*pid, SIGKILL);  // half started: nothing may stay
            std::string why = result.timed_out ? "timed out" : "exited " + std::to_string(result.exit_code);
            const auto log = read_tail(r_.command.log, 1500);
            send_line(shim_error_line(r_.command.start.front() + " exec " + why +
                                      (log.empty() ? std::string() : ": " + log)));
            return false;
        }
        pid_ = *pid;
        if (!r_.command.internal_pid_file.empty()) {
            const auto internal = read_pid(r_.command.internal_pid_file);
            if (!internal) {
                ::kill(pid_, SIGKILL);
                send_line(shim_error_line("the runtime wrote no internal pid file"));
                return false;
            }
            internal_pid_ = *internal;
        }
        if (!is_child(pid_)) {
            // Not ours to wait for or signal: a pid we do not hold may be recycled.
            send_line(shim_error_line("the runtime left process " + std::to_string(pid_) + " to someone else"));
            return false;
        }
        send_line(shim_started_line());
        return true;
    }

    // Until the process has ended and been reported, or is killed after its handle went.
    void watch(int sigfd) {
        line_buffer in(max_signal_line_bytes);
        bool handle_open = true;
        for (;;) {
            reap();
            if (ended_) break;
            if (handle_open == false && clock_type::now() >= give_up_at_) break;
            int timeout_ms = -1;
            if (!handle_open) {
                if (clock_type::now() >= retry_at_) {
                    deliver(SIGKILL);
                    retry_at_ = give_up_at_;
                }
                timeout_ms = 100;
            }
            pollfd p[2] = {{handle_open ? shim_control_fd : -1, POLLIN, 0}, {sigfd, POLLIN, 0}};
            if (::poll(p, 2, timeout_ms) < 0 && errno != EINTR) break;
            if ((p[1].revents & POLLIN) != 0) {
                signalfd_siginfo info{};
                while (::read(sigfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
                    if (info.ssi_signo != SIGCHLD && handle_open) {
                        // Someone stops the shim: the process goes with it.
                        handle_open = false;
                        kill_after_handle();
                    }
                }
            }
            if (handle_open && p[0].revents != 0) {
                char buf[512];
                const auto n = ::recv(shim_control_fd, buf, sizeof buf, MSG_DONTWAIT);
                if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
                bool broken = n <= 0 || !in.append({buf, static_cast<std::size_t>(n)});
                while (!broken) {
                    const auto line = in.pop();
                    if (!line) break;
                    const auto sig = parse_signal_line(*line);
                    if (!sig) broken = true;
                    else deliver(*sig);
                }
                if (broken) {
                    handle_open = false;
                    kill_after_handle();
                }
            }
        }
        if (ended_ && handle_open) send_line(exit_line(exit_of(status_, r_.command.status_is_exit_code, sent_)));
    }

private:
    static bool is_child(pid_t pid) {
        siginfo_t info{};
        return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0;
    }

    void kill_after_handle() {
        deliver(SIGKILL);
        retry_at_ = clock_type::now() + kill_retry_after;
        give_up_at_ = clock_type::now() + kill_give_up_after;
    }

    // Every child that has ended; the watched one ends the watch.
    void reap() {
        for (;;) {
            int status = 0;
            const pid_t w = ::waitpid(-1, &status, WNOHANG);
            if (w <= 0) return;
            if (w == pid_) {
                status_ = status;
                ended_ = true;
            }
        }
    }

    void deliver(int sig) {
        if (ended_) return;
        sent_.insert(sig);
        if (r_.command.signal_command.empty()) {
            // Still our child (reaped only in reap()), so the pid and its group
            // id are its own. It leads its group, as in a terminal: the group
            // gets the signal, children included.
            const pid_t group = ::getpgid(pid_);
            ::kill(group == pid_ ? -pid_ : pid_, sig);
            return;
        }
        auto argv = r_.command.signal_command;
        for (auto& a : argv) {
            if (a == "{pid}") a = std::to_string(internal_pid_);
            else if (a == "{signal}") a = std::to_string(sig);
        }
        try {
            run_command(argv, signal_command_timeout);
        } catch (...) {
            // Best effort: a sandbox that is gone takes the process with it.
        }
    }

    shim_request r_;
    pid_t pid_ = -1;
    pid_t internal_pid_ = -1;
    bool ended_ = false;
    int status_ = 0;
    std::set<int> sent_;
    clock_type::time_point retry_at_{}, give_up_at_{};
};

bool usable(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }

}  // namespace

int main() {
    struct stat st {};
    if (::fstat(shim_control_fd, &st) != 0 || !S_ISSOCK(st.st_mode) || !usable(shim_stdin_fd) ||
        !usable(shim_stdout_fd) || !usable(shim_stderr_fd))
        return 2;
    for (const int fd : {shim_control_fd, shim_stdin_fd, shim_stdout_fd, shim_stderr_fd})
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // the runtime gets 4–6 as its 0–2, nothing else

    // The launcher waits only for this first process; the second one lives
    // on its own, in its own session (a terminal's signals are not its own).
    const pid_t child = ::fork();
    if (child < 0) return 1;
    if (child > 0) return 0;
    ::setsid();
    if (::chdir("/") != 0) return 1;
    ::umask(077);
    // Nothing of the launcher's environment reaches the runtime.
    ::clearenv();
    ::setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);

    sigset_t watched;
    sigemptyset(&watched);
    for (const int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&watched, s);
    ::sigprocmask(SIG_BLOCK, &watched, nullptr);
    const int sigfd = ::signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
    std::signal(SIGPIPE, SIG_IGN);
    if (sigfd < 0 || ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
        send_line(shim_error_line("cellgate-exec-shim cannot watch its children"));
        return 1;
    }

    const auto line = read_request();
    if (!line) return 1;
    std::optional<shim_request> request;
    try {
        request = parse_shim_request(*line);
    } catch (const std::exception& e) {
        send_line(shim_error_line(std::string("bad request: ") + e.what()));
        return 1;
    }
    supervisor s(std::move(*request));
    if (!s.start()) return 1;
    s.watch(sigfd);
    return 0;
}
