#pragma once

// The session's policy (kernels/policy.hpp) applied to cells that clients
// send over the Jupyter WebSocket: JupyterLab, @jupyterlab/services, a Kernel
// Gateway client, jupyter_server --gateway-url. /v1 cells carry the same
// policy into agent/execution, which enforces it itself (it also collects the
// result); this watch leaves the gateway's own cells alone.
//
// A cell is followed from the kernel's "busy" status for an execute_request to
// its "idle": ipykernel runs one at a time, so there is at most one. While it
// runs, its stream output counts against output_limit and its rich outputs
// against result_limit; past a limit the rest is withheld, and the client
// hears it the Jupyter way, as a stderr stream message under that cell. Past
// exec_timeout the cell is interrupted (the kernel's own KeyboardInterrupt
// error and execute_reply follow); a cell that is still running `grace` after
// the interrupt gets an error and an execute_reply from the gateway, and the
// kernel is restarted. Nothing here drops a socket.
//
// It also says what each client cell was, for the ledger: a cell_summary when
// it starts (busy) and one when it ends (its code as the kernel echoed it in
// execute_input, its times, status, bytes, and what the limits cut). The end
// waits for the cell's execute_reply (which says "aborted") when that comes
// after the idle status, for at most reply_wait. The gateway's own cells
// (/v1 executions, recorded by the agent service itself) produce none.
//
// Not thread-safe: the kernel calls it under its own lock.

#include "kernels/cell_summary.hpp"
#include "kernels/policy.hpp"
#include "messaging/kernel_message.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::kernels {

class cell_watch {
public:
    using clock = std::chrono::steady_clock;
    static constexpr std::size_t max_errors_per_cell = 16;
    static constexpr std::size_t max_remembered = 256;  // own cells, and requests' channel sets
    static constexpr std::size_t max_reports = 64;      // summaries nobody has taken yet
    static constexpr std::chrono::seconds reply_wait{1};

    // A cell the gateway itself sends on its own channel set.
    void own(std::string msg_id);
    // A client sent this execute_request on channel set `set_id` (where a
    // reply made up by the gateway would go). Remembered for the newest
    // max_remembered; enforcement does not depend on it.
    void requested(std::string msg_id, std::uint64_t set_id);

    // Messages the gateway makes up (the kernel numbers them when it sends them).
    using made_message = std::shared_ptr<messaging::kernel_message>;

    struct verdict {
        bool deliver = true;
        // Sent to every client before this message (or instead of it): the
        // head of a stream cut at the limit, a notice under the cell.
        std::vector<made_message> before;
    };
    // Every iopub message, in arrival order. `state` is a status message's
    // execution_state ("" for other types).
    verdict on_iopub(const messaging::kernel_message& m, std::string_view state, const kernel_policy& p,
                     clock::time_point now);
    // An execute_reply the kernel sent to a client (its status: ok, error, aborted).
    void on_reply(const messaging::kernel_message& m);
    // The cells that started or ended since the last call, in that order; a
    // cell whose reply has not come `reply_wait` after its idle ends without it.
    std::vector<cell_summary> take_reports(clock::time_point now);

    enum class action { none, interrupt, restart };
    struct overdue {
        action what = action::none;
        made_message notice;  // under the cell, for every client
        // For action::restart: the error and execute_reply the kernel will
        // never send, and the channel set the reply goes to (0: unknown).
        made_message error, reply;
        std::uint64_t set_id = 0;
    };
    overdue check(const kernel_policy& p, clock::time_point now, clock::duration grace);

    // The kernel restarted, died or was replaced: no cell is running. The
    // cell that was ends (timeout when its time limit was passed, else kernel_died).
    void reset(clock::time_point now);
    // A client's cell is running (the one this watch enforces limits on).
    bool running() const noexcept { return cell_.has_value(); }
    // A cell someone asked for is running, the gateway's own included: what
    // keeps a session from idle culling. A kernel that says "busy" by itself,
    // or prints from a thread, does not (review L13).
    bool serving_request() const noexcept { return cell_.has_value() || !own_running_.empty(); }

    // Builders for the messages above; public for the tests.
    static made_message notice(std::string_view text, const std::string& parent_header);

private:
    struct cell {
        std::string msg_id, parent_header;  // the request's id and header
        clock::time_point started, interrupted;
        std::size_t text_bytes = 0, result_bytes = 0, errors = 0;
        bool text_cut = false, results_cut = false, errors_cut = false;
        int stage = 0;  // 0 running, 1 interrupted, 2 given up on
        std::string execution_count = "null";  // raw, from execute_input
        // For the summary.
        std::optional<std::string> code;
        std::size_t code_bytes = 0;
        clock::time_point ended;
        std::uint64_t stdout_bytes = 0, stderr_bytes = 0, produced_result_bytes = 0;
        std::size_t results = 0;
        std::string reply_status, error_name;
        bool restarted = false;
    };

    void on_status(const messaging::kernel_message& m, std::string_view state, clock::time_point now);
    verdict on_stream(const messaging::kernel_message& m, const kernel_policy& p);
    verdict on_result(const messaging::kernel_message& m, const kernel_policy& p);
    verdict on_error(const messaging::kernel_message& m);
    std::uint64_t set_of(const std::string& msg_id) const;
    void count_text(const messaging::kernel_message& m);
    void report(cell_summary s);
    void end(cell c);  // its summary, into reports_

    std::optional<cell> cell_;
    std::optional<cell> ending_;  // idle, its reply not seen yet
    std::vector<cell_summary> reports_;
    std::deque<std::string> own_;
    std::string own_running_;  // the gateway's own cell the kernel is running
    std::deque<std::pair<std::string, std::uint64_t>> requests_;
};

}  // namespace cellgate::kernels
