#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate {

std::string base64_encode(std::string_view data);
// Strict except for whitespace (line breaks from encoders that wrap); nullopt
// on any other character or bad padding.
std::optional<std::string> base64_decode(std::string_view text);
bool is_valid_utf8(std::string_view s) noexcept;
// `s` with every byte that is not part of valid UTF-8 replaced by U+FFFD
// (a program's output, which need not be UTF-8, into a JSON string).
std::string valid_utf8(std::string_view s);
// How much of `s` to send now so that a UTF-8 sequence cut by the end of a
// chunk waits for its next bytes: s.size() minus an incomplete last sequence
// (at most 3 bytes). Bytes that could never complete are not held back.
std::size_t utf8_complete_length(std::string_view s) noexcept;
std::string hex_encode(std::string_view data);
// SHA-256 of `data`, 64 lower-case hex digits.
std::string sha256_hex(std::string_view data);
// SHA-256 of what file `fd` holds, read from its start (pread): nullopt on a read error.
std::optional<std::string> sha256_hex_of_file(int fd);
// Bytes below 0x20 other than tab, LF and CR: text with them is binary in
// practice, and JSON escapes most of them as six bytes (\u0000).
bool has_control_bytes(std::string_view s) noexcept;
// How long `s` is as a JSON string's contents, escaped the way nlohmann dumps it.
std::size_t json_escaped_size(std::string_view s) noexcept;
// A path for a URL: every byte but [A-Za-z0-9/._~-] %-escaped.
std::string url_encode_path(std::string_view path);

}  // namespace cellgate
