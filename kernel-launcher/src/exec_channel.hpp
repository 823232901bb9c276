#pragma once

#include "cellgate/launcher/exec_process.hpp"
#include "exec_wire.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace cellgate::launcher {

// The handle's side of an exec: a stream socket to whoever supervises the
// process (cellgate-exec-shim for the launcher, cellgate-launchd for its
// client). Signals go out as lines; one exit line comes back. Closing the
// socket is the request to kill the process. Thread-safe (the launcher's
// remove() signals the execs of a sandbox from its own thread).
class exec_channel final : public exec_process::control {
public:
    struct state {
        std::mutex mutex;
        unique_fd socket;
        line_buffer in{max_exit_line_bytes};
        std::optional<exec_exit> exit;
        // Sends a signal line; false when the peer is gone (the process has
        // ended or is being killed).
        bool send_signal(int sig);
        // True once the peer has reported the exit or closed the socket,
        // without consuming anything.
        bool ended();
    };

    // `pending`: bytes already read from the socket past an earlier reply.
    exec_channel(unique_fd socket, std::string_view pending = {});

    void signal(int sig) override;
    int exit_fd() const noexcept override { return fd_; }
    std::optional<exec_exit> exit_status() override;

    // For the launcher's registry of live execs (weak: it never keeps one alive).
    std::weak_ptr<state> watch() const { return state_; }

private:
    std::shared_ptr<state> state_;
    int fd_;
};

}  // namespace cellgate::launcher
