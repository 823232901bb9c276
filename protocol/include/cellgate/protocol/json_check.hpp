#pragma once

#include <cstddef>
#include <string_view>

namespace cellgate::protocol {

// Says whether `text` is one complete JSON text (RFC 8259) in valid UTF-8,
// optionally requiring an object at the top. It builds nothing and recurses
// nowhere (nesting depth is bounded only by `max_depth`), and scans string
// bodies a word at a time, so validating a kernel's 1 MB stream message costs
// well under a millisecond — nlohmann::json::accept, which it agrees with,
// takes tens. Kernel output passes through the gateway as raw bytes, so this
// is the check that keeps a hostile kernel's garbage from reaching clients.
struct json_check_options {
    bool require_object = false;
    std::size_t max_depth = 10000;
};

bool is_valid_json(std::string_view text, json_check_options options = {}) noexcept;

// Bracket depth outside strings is at most `max_depth`: a cheap pass before a
// recursive parser (request bodies, notebooks, legacy WebSocket frames). Exact
// for valid JSON; for invalid JSON it only has to be safe, as the parser
// refuses it anyway.
bool json_nesting_within(std::string_view text, std::size_t max_depth) noexcept;

}  // namespace cellgate::protocol
