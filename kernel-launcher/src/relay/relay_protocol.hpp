#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

// The byte-stream relay between the host and a gVisor sandbox.
//
// gVisor keeps the unix sockets a sandboxed process binds inside the sandbox,
// so the host cannot reach the kernel's ipc sockets. Instead a small relay in
// the sandbox (sandbox/cellgate-relay.py) talks to the kernel's five sockets,
// and cellgate-relay on the host listens on five host sockets; the two carry
// each accepted connection as a stream over the container's stdin (host →
// sandbox) and stdout (sandbox → host). The sandbox keeps no network interface
// but loopback, so egress stays closed by construction.
//
// Every frame is a 9-byte header and a payload:
//   type   u8       one of frame_type
//   stream u32 BE   0 for hello and ready, > 0 otherwise
//   length u32 BE   payload bytes
// hello   sandbox → host, the first frame, payload hello_payload
// ready   sandbox → host, once: the kernel has bound all five sockets
// open    host → sandbox, payload one byte: the channel 0…4 (k-1 … k-5);
//         stream ids strictly increase from 1 and are never reused
// data    both ways, 1 … max_data_bytes, never beyond the receiver's window
// credit  both ways, payload u32 BE > 0: that many more bytes were delivered,
//         so the peer may send that many more on the stream
// close   both ways, empty: the stream is over; later frames for it are dropped
// reset   host → sandbox, stream 0, empty: the host side is new (the sandbox
//         was restored from a checkpoint, on new pipes): the sandbox drops
//         every stream and what it had not yet written, forgets stream ids,
//         and begins again with hello (and ready). The new host side skips
//         whatever reaches it before that hello (bytes of the old pipe's
//         last frames).
// Each direction of each stream starts with a window of window_bytes, so no
// stream can hold up another and every buffer has a bound. The sandbox side is
// untrusted: anything else from it ends that sandbox's relay (and so the
// sandbox), never anything more.
namespace cellgate::launcher::relay {

enum class frame_type : std::uint8_t { hello = 1, ready = 2, open = 3, data = 4, credit = 5, close = 6, reset = 7 };

inline constexpr std::size_t header_bytes = 9;
inline constexpr std::size_t max_data_bytes = 64 << 10;
inline constexpr std::uint32_t window_bytes = 256 << 10;
inline constexpr std::string_view hello_payload = "cellgate-relay/1";
inline constexpr int channel_count = 5;

struct frame_header {
    frame_type type = frame_type::data;
    std::uint32_t stream = 0;
    std::uint32_t length = 0;
};

// Appends one frame to `out`.
void append_frame(std::string& out, frame_type type, std::uint32_t stream, std::string_view payload = {});
void append_credit(std::string& out, std::uint32_t stream, std::uint32_t bytes);

// Reads a header from the first header_bytes of `bytes` (which must hold that
// many). Returns an error message when the header itself is impossible: an
// unknown type, or a length the type never has. The length is checked before
// any payload is awaited, so garbage cannot make the reader wait for 4 GiB.
std::optional<std::string> parse_header(std::string_view bytes, frame_header& out);

std::uint32_t read_u32(std::string_view bytes);  // big-endian, bytes.size() >= 4

std::string_view to_string(frame_type t) noexcept;

}  // namespace cellgate::launcher::relay
