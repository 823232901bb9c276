#include "exec_session.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <optional>

namespace cellgate::launcher {

namespace {

// Output a background child still writes after the exit is not waited for longer.
constexpr auto drain_after_exit = std::chrono::milliseconds(300);

bool copy_once(int from, int to) {
    char buf[16384];
    const auto n = ::read(from, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) return false;  // EOF, or EIO from a PTY whose other side is gone
    for (ssize_t done = 0; done < n;) {
        const auto m = ::write(to, buf + done, static_cast<std::size_t>(n - done));
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) return false;
        done += m;
    }
    return true;
}

class raw_terminal {
public:
    raw_terminal(int fd, bool wanted) : fd_(fd) {
        if (!wanted || ::isatty(fd) == 0 || ::tcgetattr(fd, &saved_) != 0) return;
        termios raw = saved_;
        ::cfmakeraw(&raw);
        active_ = ::tcsetattr(fd, TCSANOW, &raw) == 0;
    }
    ~raw_terminal() { restore(); }
    void restore() {
        if (active_) ::tcsetattr(fd_, TCSANOW, &saved_);
        active_ = false;
    }

private:
    int fd_;
    termios saved_{};
    bool active_ = false;
};

void follow_size(exec_process& p) {
    winsize ws{};
    if (::ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
        try {
            p.resize(std::min<std::uint16_t>(ws.ws_row, 1000), std::min<std::uint16_t>(ws.ws_col, 1000));
        } catch (const launch_error&) {
        }
    }
}

}  // namespace

int run_exec_session(exec_process& p) {
    sigset_t set;
    sigemptyset(&set);
    for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&set, s);
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    const int sigfd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    raw_terminal raw(STDIN_FILENO, p.tty());
    if (p.tty()) follow_size(p);

    int in = p.tty() || p.stdin_fd() >= 0 ? STDIN_FILENO : -1;
    int out = p.tty() ? p.pty_fd() : p.stdout_fd();
    int err = p.tty() ? -1 : p.stderr_fd();
    std::optional<exec_exit> ended;
    std::chrono::steady_clock::time_point stop_at{};
    while (out >= 0 || err >= 0) {
        if (ended && std::chrono::steady_clock::now() >= stop_at) break;
        pollfd fds[5] = {{in, POLLIN, 0}, {out, POLLIN, 0}, {err, POLLIN, 0},
                         {ended ? -1 : p.exit_fd(), POLLIN, 0}, {sigfd, POLLIN, 0}};
        if (::poll(fds, 5, ended ? 50 : -1) < 0 && errno != EINTR) break;
        if (fds[0].revents != 0 && !copy_once(in, p.tty() ? p.pty_fd() : p.stdin_fd())) {
            in = -1;
            if (!p.tty()) p.take_stdin();  // the process's EOF
        }
        if (fds[1].revents != 0 && !copy_once(out, STDOUT_FILENO)) out = -1;
        if (fds[2].revents != 0 && !copy_once(err, STDERR_FILENO)) err = -1;
        if (fds[3].revents != 0 && (ended = p.exit_status())) stop_at = std::chrono::steady_clock::now() + drain_after_exit;
        if (fds[4].revents != 0) {
            signalfd_siginfo info{};
            while (::read(sigfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
                if (info.ssi_signo == SIGWINCH) {
                    if (p.tty()) follow_size(p);
                } else if (!ended) {
                    p.signal(static_cast<int>(info.ssi_signo));
                }
            }
        }
    }
    if (!ended) ended = p.wait();
    raw.restore();
    return ended->code < 0 ? 255 : ended->code;
}

}  // namespace cellgate::launcher
