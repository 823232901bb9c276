#pragma once

// A cell that reached a kernel other than through the agent service: a
// Jupyter WebSocket client's (kernels/cell_watch.hpp follows it) or one run in
// an E2B code context (e2b/code_contexts.cpp). The kernel hands it to its
// settings' on_cell hook (kernel.hpp) once when it starts and once when it
// ends; the agent service turns the pair into a ledger record, the same
// record a /v1 execution gets (agent/ledger.hpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace cellgate::kernels {

struct cell_summary {
    using clock = std::chrono::steady_clock;
    // A cell's code is kept (to be hashed by the ledger) up to this size;
    // past it the record has its size and no hash.
    static constexpr std::size_t max_code_bytes = 8u << 20;

    std::string id;         // the execute_request's msg_id; a context cell's own id
    std::string surface;    // "jupyter", "e2b"
    std::string context;    // the E2B code context it ran in ("": the kernel)
    bool ended = false;     // false: it has just started (id, surface, context, started only)
    std::optional<std::string> code;  // none: not known (a silent request), or past max_code_bytes
    std::size_t code_bytes = 0;
    clock::time_point started, ended_at;
    // As a /v1 execution's: ok, error, interrupted, timeout, kernel_died;
    // and aborted (a Jupyter request the kernel skipped after an earlier error).
    std::string status;
    std::string error_name;  // the cell's error's ename ("" when none)
    // Bytes the cell produced, those withheld past its limits included.
    std::uint64_t stdout_bytes = 0, stderr_bytes = 0, result_bytes = 0;
    std::size_t results = 0;  // rich outputs (display_data, execute_result)
    bool output_truncated = false, results_truncated = false;  // a limit cut them
    bool kernel_restarted = false;  // its interpreter was restarted or died under it
};

}  // namespace cellgate::kernels
