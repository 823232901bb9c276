#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cellgate::wire {

// Follows what a kernel sends on one ZMTP 3.x connection, byte by byte and
// without buffering: the 64-byte greeting (NULL mechanism only), then frames
// of a flags byte (MORE, LONG, COMMAND), a 1- or 8-byte size and a body. It
// counts frames and body bytes per message and fails as soon as a frame's
// header would take the message past a limit, before its body is seen:
// libzmq holds a whole multipart message before the reader of the socket
// sees its first frame, and ZMQ_MAXMSGSIZE bounds only each frame.
class zmtp_reader {
public:
    struct limits {
        std::size_t max_frames = 64;                 // traffic frames per message
        std::size_t max_message_bytes = 96u << 20;   // their bodies together
        std::size_t max_command_bytes = 64u << 10;   // READY, PING …: small
    };
    enum class verdict {
        ok,
        bad_greeting,       // not ZMTP 3.x with NULL security (1.0/2.0 use other decoders)
        bad_flags,          // reserved bits set, or a command with MORE
        too_many_frames,
        message_too_large,
        command_too_large,
    };

    explicit zmtp_reader(limits l) : limits_(l) {}

    // Reads the next bytes of the stream and returns how many are good:
    // all of them, or those before the byte that broke a rule (then
    // status() says which, and every later feed returns 0).
    std::size_t feed(std::string_view bytes) noexcept;

    verdict status() const noexcept { return verdict_; }
    // Bodies of traffic frames so far, and of the message not yet ended.
    std::uint64_t payload_bytes() const noexcept { return payload_; }
    std::uint64_t partial_message_bytes() const noexcept { return message_bytes_; }
    std::uint64_t messages() const noexcept { return messages_; }

    static constexpr std::size_t greeting_bytes = 64;

private:
    enum class state { greeting, flags, size, body };
    bool greeting_byte(std::size_t at, unsigned char c) noexcept;
    bool header_done() noexcept;
    void frame_done() noexcept;

    limits limits_;
    verdict verdict_ = verdict::ok;
    state state_ = state::greeting;
    std::size_t at_ = 0;               // greeting byte, or size byte, being read
    unsigned char flags_ = 0;
    std::uint64_t size_ = 0;           // of the frame being read
    std::uint64_t left_ = 0;           // of its body
    std::size_t message_frames_ = 0;
    std::uint64_t message_bytes_ = 0;
    std::uint64_t payload_ = 0;
    std::uint64_t messages_ = 0;
};

std::string_view to_string(zmtp_reader::verdict v) noexcept;

}  // namespace cellgate::wire
