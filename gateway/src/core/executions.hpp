#pragma once

// The core's front door for cells. Every surface that runs a cell through the
// agent engine (/v1, E2B's default context, MCP) parses its own wire into a
// cell_request and runs it here: the session's limits and the gateway's
// ceilings become the cell's options in one place (core/cell_request.hpp), a
// paused session resumes when its policy lets it and a dead one is revived
// before the cell is refused (ready), and the result (agent/execution.hpp)
// names no surface's URLs, so each surface renders its own links. Cells sent
// over the Jupyter WebSocket run in the kernel's own stream and are held to
// the same policy there (kernels/cell_watch.hpp), with the same notices.

#include "agent/agent_service.hpp"
#include "agent/execution.hpp"
#include "core/cell_request.hpp"
#include "kernels/failure.hpp"
#include "kernels/kernel_manager.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace cellgate::core {

// Why a cell was not run.
struct not_run {
    // busy: the session is paused and resumes only when asked;
    // unavailable: its kernel is dead.
    kernels::failure why;
    // When to ask again (a dead kernel: its restart may be under way, or due
    // once its backoff ends); none for a paused session, which waits to be asked.
    std::optional<std::chrono::seconds> retry_after;
};

class executions {
public:
    executions(kernels::kernel_manager& kernels, agent::agent_service& agents);

    // The preconditions of every cell: a paused session resumes (the cell
    // waits in the kernel's queue meanwhile) when its policy says so; a dead
    // kernel is revived (within the restart budget and its backoff, so a
    // client that retries at once cannot keep the launch threads busy) and
    // the cell refused, rather than left to wait out its timeout.
    std::optional<not_run> ready(const kernels::kernel_ptr& k);

    // The options for `r` on `k`: cell_options, and the spool a budgeted cell's
    // whole output goes to.
    agent::execution_options options(const kernels::kernel& k, const cell_request& r) const;

    // Queues the cell behind the session's others; `on_done` gets its result.
    // The returned execution is what cancel() takes.
    std::shared_ptr<agent::execution> run(const kernels::kernel_ptr& k, agent::execution_options options,
                                          agent::execution::event_fn on_event, agent::execution::done_fn on_done);
    void cancel(const std::string& kernel_id, const std::shared_ptr<agent::execution>& e);

    agent::agent_service& agents() noexcept { return agents_; }

private:
    kernels::kernel_manager& kernels_;
    agent::agent_service& agents_;
};

}  // namespace cellgate::core
