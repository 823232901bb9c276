#pragma once

// cellgate-exec-shim: the supervisor of one exec'd process (exec-shim/main.cpp),
// and the launcher's side of starting it.
//
// The launcher starts the shim with a socket as descriptor 3 and the
// process's stdin, stdout and stderr as 4, 5 and 6; the shim daemonises (so
// nobody has to reap it) and becomes a child subreaper. Over the socket:
//   launcher → shim   one request line (the runtime's exec_command), then signal lines
//   shim → launcher   {"started":{}} or {"error":"…"}, then one exit line (exec_wire.hpp)
// The shim runs the runtime's detached exec; the process (runc) or the
// runtime's waiter for it (runsc) is orphaned to the shim, which therefore
// can wait for it and signal it without any pid ever being recycled under
// it. When the socket closes, because the handle was dropped or its holder
// died, the shim kills the process: nothing outlives its handle.

#include "cellgate/launcher/exec_process.hpp"
#include "cellgate/launcher/oci_runtime.hpp"
#include "exec_channel.hpp"

#include <chrono>
#include <set>
#include <string>
#include <string_view>

namespace cellgate::launcher {

inline constexpr int shim_control_fd = 3;
inline constexpr int shim_stdin_fd = 4;
inline constexpr int shim_stdout_fd = 5;
inline constexpr int shim_stderr_fd = 6;
inline constexpr std::size_t max_shim_request_bytes = 256u << 10;
inline constexpr std::size_t max_shim_reply_bytes = 8u << 10;

struct shim_request {
    exec_command command;
    std::chrono::milliseconds start_timeout{30000};
};
std::string shim_request_line(const shim_request& r);  // with its '\n'
// Throws std::invalid_argument on anything but a well-formed request.
shim_request parse_shim_request(std::string_view line);

std::string shim_started_line();
std::string shim_error_line(std::string_view message);

// How the process ended, from the wait status of the host process the shim
// waited for (exec_command.status_is_exit_code says which kind that is) and
// the signals the shim delivered. A waiter's 128 + n is a signal only when n
// was sent; its 128 (runsc's own failure: the sandbox went away under it)
// after a SIGKILL is that SIGKILL.
exec_exit exit_of(int wait_status, bool status_is_exit_code, const std::set<int>& sent);

// cellgate-exec-shim: `configured` if given, else next to the running
// program, else in PATH; "" when there is none.
std::string find_exec_shim_binary(const std::string& configured);

// What start_exec_shim hands the process: pipes' far ends, or /dev/null.
struct shim_stdio {
    int stdin_fd = -1;
    int stdout_fd = -1;
    int stderr_fd = -1;
};

struct started_exec {
    exec_process process;
    std::weak_ptr<exec_channel::state> watch;  // for the launcher's registry of live execs
};

// Starts the shim for `request` and waits until the process runs, or throws
// launch_error("exec-start") with the runtime's own words. `ours` are the
// caller's ends of the process's stdio, handed over in the exec_process.
// With a tty, `console_listener` is listening at the request's console
// socket: the PTY master arrives there and is sized `rows` × `cols` at once
// (runc has applied process.json's consoleSize already; runsc ignores it and
// starts the process only after it has sent the master).
started_exec start_exec_shim(const std::string& shim_binary, const shim_request& request, const shim_stdio& theirs,
                             exec_process::stdio ours, int console_listener, std::uint16_t rows, std::uint16_t cols);

}  // namespace cellgate::launcher
