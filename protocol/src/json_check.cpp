#include "cellgate/protocol/json_check.hpp"

#include <cstdint>
#include <cstring>
#include <string>

namespace cellgate::protocol {

namespace {

using byte = unsigned char;

constexpr std::uint64_t ones = 0x0101010101010101ull;
constexpr std::uint64_t highs = 0x8080808080808080ull;

// True when some byte of the word is zero (the classic carry trick: exact for
// "is there one", which is all that is asked here).
constexpr bool has_zero_byte(std::uint64_t w) noexcept { return ((w - ones) & ~w & highs) != 0; }

// True when the 8 bytes at p are plain string content: no quote, no
// backslash, no control character, nothing outside ASCII.
inline bool plain_word(const byte* p) noexcept {
    std::uint64_t w;
    std::memcpy(&w, p, sizeof w);
    if ((w & highs) != 0) return false;
    // ASCII only from here, so "byte < 0x20" is "byte + 0x60 has no high bit"
    // and no carry crosses into the next byte.
    if (((w + ones * 0x60) & highs) != highs) return false;
    return !has_zero_byte(w ^ (ones * '"')) && !has_zero_byte(w ^ (ones * '\\'));
}

class checker {
public:
    checker(std::string_view text, json_check_options options)
        : p_(reinterpret_cast<const byte*>(text.data())), end_(p_ + text.size()), options_(options) {}

    bool run() {
        skip_ws();
        if (options_.require_object && (p_ == end_ || *p_ != '{')) return false;
        for (;;) {
            // A value starts here.
            skip_ws();
            if (p_ == end_) return false;
            switch (*p_) {
            case '{':
                ++p_;
                skip_ws();
                if (p_ != end_ && *p_ == '}') {
                    ++p_;
                    break;
                }
                if (!push('{') || !member_key()) return false;
                continue;
            case '[':
                ++p_;
                skip_ws();
                if (p_ != end_ && *p_ == ']') {
                    ++p_;
                    break;
                }
                if (!push('[')) return false;
                continue;
            case '"':
                if (!string()) return false;
                break;
            case 't':
                if (!literal("true")) return false;
                break;
            case 'f':
                if (!literal("false")) return false;
                break;
            case 'n':
                if (!literal("null")) return false;
                break;
            default:
                if (!number()) return false;
            }
            // After a value: close containers, or go on to the next element.
            for (;;) {
                skip_ws();
                if (stack_.empty()) return p_ == end_;
                if (p_ == end_) return false;
                const char open = stack_.back();
                if (*p_ == ',') {
                    ++p_;
                    if (open == '{' && !member_key()) return false;
                    break;  // the next value
                }
                if (*p_ != (open == '{' ? '}' : ']')) return false;
                ++p_;
                stack_.pop_back();
            }
        }
    }

private:
    void skip_ws() noexcept {
        while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    }

    bool push(char open) {
        if (stack_.size() >= options_.max_depth) return false;
        stack_.push_back(open);
        return true;
    }

    // `"key" :` inside an object.
    bool member_key() {
        skip_ws();
        if (p_ == end_ || *p_ != '"' || !string()) return false;
        skip_ws();
        if (p_ == end_ || *p_ != ':') return false;
        ++p_;
        return true;
    }

    bool literal(const char* word) noexcept {
        const std::size_t n = std::strlen(word);
        if (static_cast<std::size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return false;
        p_ += n;
        return true;
    }

    static bool digit(byte c) noexcept { return c >= '0' && c <= '9'; }

    bool digits() noexcept {
        if (p_ == end_ || !digit(*p_)) return false;
        while (p_ != end_ && digit(*p_)) ++p_;
        return true;
    }

    bool number() noexcept {
        if (*p_ == '-') ++p_;
        if (p_ == end_) return false;
        if (*p_ == '0') {
            ++p_;
        } else if (!digits()) {
            return false;
        }
        if (p_ != end_ && *p_ == '.') {
            ++p_;
            if (!digits()) return false;
        }
        if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
            ++p_;
            if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
            if (!digits()) return false;
        }
        return true;
    }

    bool hex4(std::uint32_t& value) noexcept {
        if (end_ - p_ < 4) return false;
        value = 0;
        for (int i = 0; i < 4; ++i, ++p_) {
            const byte c = *p_;
            std::uint32_t d;
            if (c >= '0' && c <= '9') d = c - '0';
            else if (c >= 'a' && c <= 'f') d = c - 'a' + 10u;
            else if (c >= 'A' && c <= 'F') d = c - 'A' + 10u;
            else return false;
            value = value * 16 + d;
        }
        return true;
    }

    // After the backslash.
    bool escape() noexcept {
        if (p_ == end_) return false;
        const byte c = *p_++;
        switch (c) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            return true;
        case 'u': {
            std::uint32_t unit;
            if (!hex4(unit)) return false;
            if (unit >= 0xDC00 && unit <= 0xDFFF) return false;  // a low surrogate alone
            if (unit >= 0xD800 && unit <= 0xDBFF) {               // must be followed by a low one
                if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
                p_ += 2;
                std::uint32_t low;
                return hex4(low) && low >= 0xDC00 && low <= 0xDFFF;
            }
            return true;
        }
        default:
            return false;
        }
    }

    static bool cont(byte c) noexcept { return (c & 0xC0) == 0x80; }

    // One UTF-8 sequence of 2–4 bytes (RFC 3629: no overlong forms, no
    // surrogates, nothing past U+10FFFF).
    bool utf8() noexcept {
        const byte c = *p_;
        const auto left = end_ - p_;
        if (c >= 0xC2 && c <= 0xDF) {
            if (left < 2 || !cont(p_[1])) return false;
            p_ += 2;
            return true;
        }
        if (c >= 0xE0 && c <= 0xEF) {
            if (left < 3 || !cont(p_[1]) || !cont(p_[2])) return false;
            if (c == 0xE0 && p_[1] < 0xA0) return false;  // overlong
            if (c == 0xED && p_[1] > 0x9F) return false;  // surrogates
            p_ += 3;
            return true;
        }
        if (c >= 0xF0 && c <= 0xF4) {
            if (left < 4 || !cont(p_[1]) || !cont(p_[2]) || !cont(p_[3])) return false;
            if (c == 0xF0 && p_[1] < 0x90) return false;  // overlong
            if (c == 0xF4 && p_[1] > 0x8F) return false;  // past U+10FFFF
            p_ += 4;
            return true;
        }
        return false;
    }

    // At the opening quote.
    bool string() noexcept {
        ++p_;
        for (;;) {
            while (end_ - p_ >= 8 && plain_word(p_)) p_ += 8;
            if (p_ == end_) return false;
            const byte c = *p_;
            if (c == '"') {
                ++p_;
                return true;
            }
            if (c == '\\') {
                ++p_;
                if (!escape()) return false;
            } else if (c < 0x20) {
                return false;
            } else if (c < 0x80) {
                ++p_;
            } else if (!utf8()) {
                return false;
            }
        }
    }

    const byte* p_;
    const byte* const end_;
    const json_check_options options_;
    std::string stack_;  // '{' or '[' per open container
};

}  // namespace

bool is_valid_json(std::string_view text, json_check_options options) noexcept {
    try {
        return checker(text, options).run();
    } catch (...) {  // only the container stack can throw (bad_alloc)
        return false;
    }
}

bool json_nesting_within(std::string_view text, std::size_t max_depth) noexcept {
    std::size_t depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max_depth) return false;
        } else if ((c == '}' || c == ']') && depth > 0) {
            --depth;
        }
    }
    return true;
}

}  // namespace cellgate::protocol
