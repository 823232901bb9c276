#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace cellgate::launcher {

struct command_result {
    int exit_code = -1;       // -1 when killed by a signal or timed out
    bool timed_out = false;
    std::string output;       // stdout and stderr together, at most 64 KiB (the tail)
};

// Runs argv (never a shell string) with stdin from /dev/null and every other
// inherited descriptor closed, so nothing of the caller leaks into a
// container. When `output_fd` >= 0 the child's stdout and stderr go there and
// `output` stays empty. A child still running at `timeout` is killed.
command_result run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                           int output_fd = -1);

// Descriptors for a child that needs more than the above: its own stdin and
// stdout, and descriptors handed over as 3, 4, … (every other one is closed).
struct command_fds {
    int stdin_fd = -1;           // -1: /dev/null
    int stdout_fd = -1;          // -1: like stderr
    int stderr_fd = -1;          // -1: captured into `output`
    std::vector<int> extra_fds;  // become 3, 4, … in the child
};
command_result run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                           const command_fds& fds);

}  // namespace cellgate::launcher
