#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace cellgate::util {

// Text that a kernel or a client wrote (kernel log tails, session ids, error
// messages quoting them) goes into log lines with its control bytes escaped,
// so it cannot forge lines or terminal sequences (review L5). Long text is cut.
inline std::string log_safe(std::string_view text, std::size_t max_bytes = 4096) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(std::min(text.size(), max_bytes) + 16);
    for (const char ch : text.substr(0, max_bytes)) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\n') out += "\\n";
        else if (c == '\\') out += "\\\\";
        else if (c < 0x20 || c == 0x7f) {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else
            out += ch;
    }
    if (text.size() > max_bytes) out += "…";
    return out;
}

}  // namespace cellgate::util
