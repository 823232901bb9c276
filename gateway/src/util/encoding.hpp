#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cellgate {

std::string base64_encode(std::string_view data);
// Strict except for whitespace (line breaks from encoders that wrap); nullopt
// on any other character or bad padding.
std::optional<std::string> base64_decode(std::string_view text);
bool is_valid_utf8(std::string_view s) noexcept;
std::string hex_encode(std::string_view data);

}  // namespace cellgate
