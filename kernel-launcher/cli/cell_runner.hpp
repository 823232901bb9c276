#pragma once

#include "cellgate/launcher/sandbox_info.hpp"

#include <chrono>
#include <string>

namespace cellgate::launcher {

// A minimal synchronous Jupyter client for the CLI's `run --exec` and `exec`:
// sends one execute_request and prints what the kernel publishes for it.
// Returns 0 when the cell ran without error.
int run_cell(const kernel_endpoints& endpoints, const std::string& code,
             std::chrono::milliseconds timeout);

}  // namespace cellgate::launcher
