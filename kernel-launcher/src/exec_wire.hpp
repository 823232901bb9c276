#pragma once

// The lines an exec's handle speaks, one JSON object each. The same two
// directions run between the launcher and cellgate-exec-shim and between a
// launcher service client and cellgate-launchd:
//   towards the process' supervisor: {"signal":"SIGTERM"}  (the exec signals only)
//   back, once, when the process has ended: {"exit":{"code":143,"signal":15}}
// Either side bounds what it buffers: a line longer than its limit is a
// protocol error, never an allocation.

#include "cellgate/launcher/exec_process.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace cellgate::launcher {

inline constexpr std::size_t max_signal_line_bytes = 128;
inline constexpr std::size_t max_exit_line_bytes = 256;

std::string signal_line(int sig);                                   // with its '\n'
std::optional<int> parse_signal_line(std::string_view line);        // nullopt: malformed or not an exec signal
std::string exit_line(const exec_exit& e);                          // with its '\n'
std::optional<exec_exit> parse_exit_line(std::string_view line);    // nullopt: not an exit line

// Bytes in, whole lines out, never more than `max_line` bytes held.
class line_buffer {
public:
    explicit line_buffer(std::size_t max_line) : max_(max_line) {}
    // False when a line runs past the limit (the peer broke the protocol).
    bool append(std::string_view bytes);
    // The next complete line without its '\n'.
    std::optional<std::string> pop();
    // Whatever is held, complete lines or not (for the next reader).
    std::string take() noexcept { return std::exchange(data_, {}); }
    bool empty() const noexcept { return data_.empty(); }

private:
    std::size_t max_;
    std::string data_;
};

}  // namespace cellgate::launcher
