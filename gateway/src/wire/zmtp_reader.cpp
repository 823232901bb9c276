#include "wire/zmtp_reader.hpp"

#include <algorithm>

namespace cellgate::wire {

namespace {

constexpr unsigned char more_flag = 0x01;
constexpr unsigned char long_flag = 0x02;
constexpr unsigned char command_flag = 0x04;
constexpr unsigned char reserved_flags = 0xf8;

// Greeting: signature (0xFF, 8 bytes padding, 0x7F), version major and
// minor, mechanism (20 bytes, NUL padded), as-server, 31 bytes filler.
constexpr std::size_t major_at = 10;
constexpr std::size_t mechanism_at = 12;
constexpr std::string_view null_mechanism = "NULL";
constexpr std::size_t mechanism_bytes = 20;

}  // namespace

std::string_view to_string(zmtp_reader::verdict v) noexcept {
    switch (v) {
    case zmtp_reader::verdict::ok: return "ok";
    case zmtp_reader::verdict::bad_greeting: return "not a ZMTP 3 greeting with NULL security";
    case zmtp_reader::verdict::bad_flags: return "bad frame flags";
    case zmtp_reader::verdict::too_many_frames: return "too many frames in one message";
    case zmtp_reader::verdict::message_too_large: return "message too large";
    case zmtp_reader::verdict::command_too_large: return "command too large";
    }
    return "?";
}

// libzmq falls back to its ZMTP 1.0 and 2.0 decoders on older greetings;
// only 3.x (what every libzmq 4 kernel speaks) passes.
bool zmtp_reader::greeting_byte(std::size_t at, unsigned char c) noexcept {
    if (at == 0) return c == 0xff;
    if (at == 9) return (c & 0x01) != 0;
    if (at == major_at) return c >= 3;
    if (at >= mechanism_at && at < mechanism_at + mechanism_bytes) {
        const std::size_t i = at - mechanism_at;
        return c == (i < null_mechanism.size() ? static_cast<unsigned char>(null_mechanism[i]) : 0);
    }
    return true;
}

// The frame's size is known, its body not yet seen: the moment to refuse.
bool zmtp_reader::header_done() noexcept {
    if ((flags_ & command_flag) != 0) {
        if (size_ > limits_.max_command_bytes) verdict_ = verdict::command_too_large;
    } else if (message_frames_ + 1 > limits_.max_frames) {
        verdict_ = verdict::too_many_frames;
    } else if (size_ > limits_.max_message_bytes - message_bytes_) {
        verdict_ = verdict::message_too_large;
    } else {
        ++message_frames_;
        message_bytes_ += size_;
    }
    return verdict_ == verdict::ok;
}

void zmtp_reader::frame_done() noexcept {
    state_ = state::flags;
    if ((flags_ & (command_flag | more_flag)) != 0) return;
    ++messages_;
    message_frames_ = 0;
    message_bytes_ = 0;
}

std::size_t zmtp_reader::feed(std::string_view bytes) noexcept {
    std::size_t i = 0;
    while (i < bytes.size() && verdict_ == verdict::ok) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        switch (state_) {
        case state::greeting:
            if (!greeting_byte(at_, c)) {
                verdict_ = verdict::bad_greeting;
                return i;
            }
            if (++at_ == greeting_bytes) state_ = state::flags;
            ++i;
            break;
        case state::flags:
            if ((c & reserved_flags) != 0 || ((c & command_flag) != 0 && (c & more_flag) != 0)) {
                verdict_ = verdict::bad_flags;
                return i;
            }
            flags_ = c;
            size_ = 0;
            at_ = 0;
            state_ = state::size;
            ++i;
            break;
        case state::size:
            size_ = (size_ << 8) | c;
            if (++at_ < ((flags_ & long_flag) != 0 ? 8u : 1u)) {
                ++i;
                break;
            }
            if (!header_done()) return i;
            ++i;
            left_ = size_;
            state_ = state::body;
            if (left_ == 0) frame_done();
            break;
        case state::body: {
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left_, bytes.size() - i));
            left_ -= n;
            if ((flags_ & command_flag) == 0) payload_ += n;
            i += n;
            if (left_ == 0) frame_done();
            break;
        }
        }
    }
    return i;
}

}  // namespace cellgate::wire
