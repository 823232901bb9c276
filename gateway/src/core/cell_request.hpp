#pragma once

// A cell as the core takes it from any surface, and the options it runs with:
// the request held to the session's policy and the gateway's ceilings. Pure
// (no kernel, no file), so unit tests and the HTTP fuzz target run exactly
// what the server runs. core/executions.hpp runs it.

#include "agent/agent_service.hpp"
#include "agent/execution.hpp"
#include "agent/output_budget.hpp"
#include "kernels/policy.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate::core {

// A cell as a door asks for it; what it leaves out, the session's policy gives.
struct cell_request {
    std::string code;
    std::optional<std::chrono::seconds> timeout;  // held to the session's (or the gateway's maximum)
    // An output budget (agent/output_budget.hpp), in tokens or in bytes, not both.
    std::optional<std::size_t> max_output_tokens;
    std::optional<std::size_t> max_output_bytes;
    std::optional<std::uint64_t> max_image_pixels;
    std::map<std::string, std::string> env;  // for this cell only (agent::check_cell_env)
    bool report_files = true;                // list the files the cell changed
    bool inline_files = false;               // and carry their contents (a one-shot run)
    bool keep_output = true;                 // with a budget: keep the whole output to read back
    // Where the surface serves a cut stream whole (execution id, stream name);
    // unset: the cut text does not say.
    std::function<std::string(const std::string& execution_id, std::string_view stream)> output_at;
    std::string surface = "v1";  // the door it came through, for its ledger record
};

// The largest budget a cell may ask for, and the smallest.
inline constexpr std::size_t max_budget_bytes = 16u << 20;
inline constexpr std::size_t min_budget_bytes = 64 * agent::bytes_per_token;

// The cell's options: the request held to the session's policy and the
// gateway's ceilings (a timeout past the ceiling is the ceiling; a budget or
// image size out of range, or both kinds of budget, is api_exception(400)).
// Pure: no kernel, no file.
agent::execution_options cell_options(const cell_request& r, const kernels::kernel_policy& policy,
                                      const agent::agent_limits& limits);

}  // namespace cellgate::core
