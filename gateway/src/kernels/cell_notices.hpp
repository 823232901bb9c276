#pragma once

// What a cell is told when it reaches one of its limits, whichever door it
// came through: a /v1 (or E2B, MCP) execution, a cell sent over the Jupyter
// kernel WebSocket (cell_watch), or an E2B code context. One wording, so a
// user or a model reads the same line everywhere; each is a whole line of
// the cell's output, in brackets.

#include <chrono>
#include <cstddef>
#include <string>

namespace cellgate::kernels::cell_notices {

// Appended to the stream whose text reached the cell's output limit (stdout
// and stderr together); the rest of its text is not shown, and the cell runs on.
std::string output_truncated(std::size_t limit_bytes);

// On stderr, once: the cell's rich outputs (plots, tables) reached its result
// limit; later ones are not shown.
std::string results_dropped(std::size_t limit_bytes);

// On stderr: the cell ran past its time limit and is being interrupted.
std::string time_limit(std::chrono::seconds limit);

// On stderr: the cell did not stop within `grace` of that interrupt, so its
// kernel is restarted (files kept, variables lost).
std::string not_stopped(std::chrono::milliseconds grace);

}  // namespace cellgate::kernels::cell_notices
