#pragma once

// Reading a few top-level members of a JSON object without building a
// document. The gateway decides per kernel message (which stream, how many
// bytes a display would keep) on the reactor's path, before anything is
// queued; a parse of a 1 MiB message there costs milliseconds, this scan
// costs a memchr. The text has already been validated (protocol::decode
// checks every JSON part a kernel sends); each function here is still
// bounds-checked and answers "not found" on text it does not expect, so
// malformed input is safe, only unhelpful.
//
// Duplicate keys: the last one wins, as in nlohmann::json::parse, so that
// what is counted here is what a parse of the same text would keep.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate::messaging::json_peek {

inline constexpr std::size_t npos = std::string_view::npos;

inline std::size_t skip_ws(std::string_view t, std::size_t i) noexcept {
    while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) ++i;
    return i;
}

// t[i] is the opening quote; returns the index just past the closing one.
inline std::size_t skip_string(std::string_view t, std::size_t i) noexcept {
    const std::size_t body = i + 1;
    for (std::size_t at = body; at < t.size();) {
        const void* q = std::memchr(t.data() + at, '"', t.size() - at);
        if (q == nullptr) return npos;
        const auto quote = static_cast<std::size_t>(static_cast<const char*>(q) - t.data());
        // Escaped when an odd number of backslashes stands right before it.
        std::size_t slashes = 0;
        while (quote - slashes > body && t[quote - slashes - 1] == '\\') ++slashes;
        if (slashes % 2 == 0) return quote + 1;
        at = quote + 1;
    }
    return npos;
}

// Returns the index just past the value that starts at t[i].
inline std::size_t skip_value(std::string_view t, std::size_t i) noexcept {
    if (i >= t.size()) return npos;
    if (t[i] == '"') return skip_string(t, i);
    if (t[i] == '{' || t[i] == '[') {
        std::size_t depth = 0;
        while (i < t.size()) {
            const char c = t[i];
            if (c == '"') {
                i = skip_string(t, i);
                if (i == npos) return npos;
                continue;
            }
            if (c == '{' || c == '[') ++depth;
            else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
            ++i;
        }
        return npos;
    }
    const std::size_t start = i;
    while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && t[i] != ' ' && t[i] != '\t' &&
           t[i] != '\n' && t[i] != '\r')
        ++i;
    return i == start ? npos : i;
}

// Calls fn(raw_key, raw_value) for each member of the object `t`, in order:
// raw_key is the key's body (between its quotes, escapes left as they are),
// raw_value the value's text. fn returns false to stop. False when `t` is not
// an object (members seen before a malformed one have been reported).
template <class Fn>
bool for_each_member(std::string_view t, Fn&& fn) {
    std::size_t i = skip_ws(t, 0);
    if (i >= t.size() || t[i] != '{') return false;
    i = skip_ws(t, i + 1);
    if (i < t.size() && t[i] == '}') return true;
    for (;;) {
        if (i >= t.size() || t[i] != '"') return false;
        const std::size_t key_end = skip_string(t, i);
        if (key_end == npos) return false;
        const std::string_view key = t.substr(i + 1, key_end - i - 2);
        i = skip_ws(t, key_end);
        if (i >= t.size() || t[i] != ':') return false;
        i = skip_ws(t, i + 1);
        const std::size_t value_end = skip_value(t, i);
        if (value_end == npos) return false;
        if (!fn(key, t.substr(i, value_end - i))) return true;
        i = skip_ws(t, value_end);
        if (i >= t.size()) return false;
        if (t[i] == '}') return true;
        if (t[i] != ',') return false;
        i = skip_ws(t, i + 1);
    }
}

namespace detail {

inline int hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

inline std::optional<std::uint32_t> hex4(std::string_view body, std::size_t i) noexcept {
    if (i + 4 > body.size()) return std::nullopt;
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
        const int d = hex_digit(body[i + k]);
        if (d < 0) return std::nullopt;
        v = v * 16 + static_cast<std::uint32_t>(d);
    }
    return v;
}

// Decodes the escape at body[i] == '\\', calling put() for each UTF-8 byte
// it stands for; returns the index past it, or npos when it is malformed.
template <class Put>
std::size_t decode_escape(std::string_view body, std::size_t i, Put&& put) {
    if (i + 1 >= body.size()) return npos;
    switch (body[i + 1]) {
    case '"': put('"'); return i + 2;
    case '\\': put('\\'); return i + 2;
    case '/': put('/'); return i + 2;
    case 'b': put('\b'); return i + 2;
    case 'f': put('\f'); return i + 2;
    case 'n': put('\n'); return i + 2;
    case 'r': put('\r'); return i + 2;
    case 't': put('\t'); return i + 2;
    case 'u': break;
    default: return npos;
    }
    auto cp = hex4(body, i + 2);
    if (!cp) return npos;
    std::size_t next = i + 6;
    if (*cp >= 0xd800 && *cp <= 0xdbff && next + 1 < body.size() && body[next] == '\\' && body[next + 1] == 'u') {
        if (const auto low = hex4(body, next + 2); low && *low >= 0xdc00 && *low <= 0xdfff) {
            cp = 0x10000 + ((*cp - 0xd800) << 10) + (*low - 0xdc00);
            next += 6;
        }
    }
    // UTF-8, as nlohmann writes it (a lone surrogate takes three bytes).
    if (*cp < 0x80) {
        put(static_cast<char>(*cp));
    } else if (*cp < 0x800) {
        put(static_cast<char>(0xc0 | (*cp >> 6)));
        put(static_cast<char>(0x80 | (*cp & 0x3f)));
    } else if (*cp < 0x10000) {
        put(static_cast<char>(0xe0 | (*cp >> 12)));
        put(static_cast<char>(0x80 | ((*cp >> 6) & 0x3f)));
        put(static_cast<char>(0x80 | (*cp & 0x3f)));
    } else {
        put(static_cast<char>(0xf0 | (*cp >> 18)));
        put(static_cast<char>(0x80 | ((*cp >> 12) & 0x3f)));
        put(static_cast<char>(0x80 | ((*cp >> 6) & 0x3f)));
        put(static_cast<char>(0x80 | (*cp & 0x3f)));
    }
    return next;
}

}  // namespace detail

// How many bytes the string body (between the quotes) holds once unescaped.
inline std::optional<std::size_t> decoded_size(std::string_view body) {
    std::size_t n = 0, i = 0;
    while (i < body.size()) {
        const void* s = std::memchr(body.data() + i, '\\', body.size() - i);
        const std::size_t esc = s ? static_cast<std::size_t>(static_cast<const char*>(s) - body.data()) : body.size();
        n += esc - i;
        if (esc == body.size()) break;
        i = detail::decode_escape(body, esc, [&n](char) { ++n; });
        if (i == npos) return std::nullopt;
    }
    return n;
}

// The unescaped string body, or nothing when it is malformed or longer than
// max_bytes (for short strings: names, states, keys).
inline std::optional<std::string> decode_string(std::string_view body, std::size_t max_bytes) {
    std::string out;
    std::size_t i = 0;
    while (i < body.size()) {
        if (body[i] != '\\') {
            out.push_back(body[i++]);
        } else {
            i = detail::decode_escape(body, i, [&out](char c) { out.push_back(c); });
            if (i == npos) return std::nullopt;
        }
        if (out.size() > max_bytes) return std::nullopt;
    }
    return out;
}

// Whether a raw key (escapes as written) names `plain`.
inline bool key_is(std::string_view raw_key, std::string_view plain) {
    if (raw_key.find('\\') == std::string_view::npos) return raw_key == plain;
    const auto decoded = decode_string(raw_key, plain.size());
    return decoded && *decoded == plain;
}

// The raw value of the object's member `key` (the last one if repeated).
inline std::optional<std::string_view> member(std::string_view object, std::string_view key) {
    std::optional<std::string_view> found;
    const bool ok = for_each_member(object, [&](std::string_view k, std::string_view v) {
        if (key_is(k, key)) found = v;
        return true;
    });
    return ok ? found : std::nullopt;
}

// The member's value when it is a string of at most max_bytes, unescaped.
inline std::optional<std::string> string_member(std::string_view object, std::string_view key,
                                                std::size_t max_bytes = 256) {
    const auto v = member(object, key);
    if (!v || v->size() < 2 || v->front() != '"') return std::nullopt;
    return decode_string(v->substr(1, v->size() - 2), max_bytes);
}

}  // namespace cellgate::messaging::json_peek
