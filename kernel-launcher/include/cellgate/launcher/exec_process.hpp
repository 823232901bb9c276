#pragma once

#include "cellgate/launcher/unique_fd.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

namespace cellgate::launcher {

// How an exec'd process ended.
struct exec_exit {
    // The exit code; 128 + n when signal n ended it (as a shell reports it);
    // -1 when nobody could tell (the process's supervisor was killed).
    int code = 0;
    // The signal that ended it; 0 when it exited. Under runsc a process that
    // dies of a signal and one that exits with 128 + n look alike, so there
    // the signal is named only when it is one this handle sent (or the
    // sandbox's removal did): otherwise the code says 128 + n and signal is 0.
    int signal = 0;
    bool operator==(const exec_exit&) const = default;
};

// A process started by sandbox_launcher::exec, as its caller holds it: its
// stdio, a way to signal it and a way to learn how it ended. The same type
// whether the launcher runs in this process or behind the launcher service.
// Move-only. Dropping it kills the process (SIGKILL) if it still runs, so
// nothing outlives its handle.
//
// The descriptors are blocking and close-on-exec; set O_NONBLOCK for an event
// loop (it changes only this side: the sandbox's ends are other open files).
// Pipes for stdin (when asked for), stdout and stderr, or with a tty one PTY
// master for both directions (reads fail with EIO once the process and every
// child holding the terminal have closed it). Output may outlive the exit
// (a background child still writing); the exit is known by exit_fd().
// Writing to stdin after the process has closed it raises SIGPIPE in the
// writer, as for any pipe: a server ignores SIGPIPE.
class exec_process {
public:
    // What stands behind a handle: the launcher's supervisor of the process
    // (cellgate-exec-shim) or the launcher service's connection for it.
    class control {
    public:
        virtual ~control() = default;
        virtual void signal(int sig) = 0;
        virtual int exit_fd() const noexcept = 0;
        virtual std::optional<exec_exit> exit_status() = 0;
    };

    struct stdio {
        unique_fd stdin_, stdout_, stderr_;  // pipes, without a tty; stdin_ only when asked for
        unique_fd pty;                       // the PTY master, with a tty
    };

    exec_process() = default;
    exec_process(stdio fds, std::unique_ptr<control> c);
    exec_process(exec_process&&) noexcept = default;
    exec_process& operator=(exec_process&&) noexcept = default;
    ~exec_process() = default;

    bool tty() const noexcept { return tty_; }
    int stdin_fd() const noexcept { return fds_.stdin_.get(); }  // -1: none (or taken)
    int stdout_fd() const noexcept { return fds_.stdout_.get(); }
    int stderr_fd() const noexcept { return fds_.stderr_.get(); }
    int pty_fd() const noexcept { return fds_.pty.get(); }
    // Ownership of a descriptor, for a caller that wraps it (an asio stream
    // descriptor) or closes it early (closing stdin is the process's EOF).
    unique_fd take_stdin() noexcept { return std::move(fds_.stdin_); }
    unique_fd take_stdout() noexcept { return std::move(fds_.stdout_); }
    unique_fd take_stderr() noexcept { return std::move(fds_.stderr_); }
    unique_fd take_pty() noexcept { return std::move(fds_.pty); }

    // Readable once the process has ended (then exit_status() has the answer).
    int exit_fd() const noexcept;
    // Never blocks: nullopt while the process runs.
    std::optional<exec_exit> exit_status();
    // Blocks until the process ends, or until `timeout` (then nullopt).
    std::optional<exec_exit> wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

    // One of the exec signals (exec_spec.hpp: SIGINT, SIGTERM, SIGKILL, SIGHUP,
    // SIGQUIT, SIGUSR1, SIGUSR2); spec_error for any other. Under runc it goes
    // to the process's group (the process leads one, as in a terminal), under
    // runsc to the process. Sending to a process that has ended does nothing.
    void signal(int sig);

    // The PTY's size (1…1000 each); the process gets SIGWINCH. spec_error
    // without a tty or after take_pty() (then use set_pty_size on the fd).
    void resize(std::uint16_t rows, std::uint16_t cols);

    explicit operator bool() const noexcept { return control_ != nullptr; }

private:
    stdio fds_;
    std::unique_ptr<control> control_;
    bool tty_ = false;
};

// TIOCSWINSZ on a PTY master; spec_error for a size outside 1…1000,
// launch_error when the ioctl fails.
void set_pty_size(int pty_fd, std::uint16_t rows, std::uint16_t cols);

}  // namespace cellgate::launcher
