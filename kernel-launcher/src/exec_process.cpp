#include "cellgate/launcher/exec_process.hpp"

#include "cellgate/launcher/exec_spec.hpp"
#include "cellgate/launcher/launch_error.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>

#include <cerrno>
#include <string>

namespace cellgate::launcher {

exec_process::exec_process(stdio fds, std::unique_ptr<control> c)
    : fds_(std::move(fds)), control_(std::move(c)), tty_(fds_.pty.get() >= 0) {}

int exec_process::exit_fd() const noexcept { return control_ ? control_->exit_fd() : -1; }

std::optional<exec_exit> exec_process::exit_status() {
    if (!control_) throw launch_error("exec", "no process behind this handle");
    return control_->exit_status();
}

std::optional<exec_exit> exec_process::wait(std::optional<std::chrono::milliseconds> timeout) {
    const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout : std::chrono::steady_clock::time_point::max();
    for (;;) {
        if (auto st = exit_status()) return st;
        int wait_ms = -1;
        if (timeout) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return std::nullopt;
            wait_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30));
        }
        pollfd p{exit_fd(), POLLIN, 0};
        if (::poll(&p, 1, wait_ms) < 0 && errno != EINTR) throw launch_error("exec", "poll", errno);
    }
}

void exec_process::signal(int sig) {
    if (!is_exec_signal(sig))
        throw spec_error("signal " + std::to_string(sig) +
                         " is not one an exec'd process takes (SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1, "
                         "SIGUSR2)");
    if (!control_) throw launch_error("exec", "no process behind this handle");
    control_->signal(sig);
}

void exec_process::resize(std::uint16_t rows, std::uint16_t cols) {
    if (!fds_.pty) throw spec_error("this process has no terminal (or its master was taken)");
    set_pty_size(fds_.pty.get(), rows, cols);
}

void set_pty_size(int pty_fd, std::uint16_t rows, std::uint16_t cols) {
    if (rows < 1 || cols < 1 || rows > max_exec_tty_side || cols > max_exec_tty_side)
        throw spec_error("rows and cols must be 1…1000");
    winsize ws{};
    ws.ws_row = rows;
    ws.ws_col = cols;
    if (::ioctl(pty_fd, TIOCSWINSZ, &ws) != 0) throw launch_error("exec-resize", "TIOCSWINSZ", errno);
}

}  // namespace cellgate::launcher
