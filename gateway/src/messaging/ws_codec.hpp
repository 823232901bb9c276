#pragma once

// The two framings of the kernel WebSocket (/api/kernels/{id}/channels), as
// pure functions: bytes in, a message or an error out. Every frame from a
// client is untrusted: sizes and offsets are checked before any JSON is
// parsed, and nothing here throws or asserts on bad input.
//
// Default ("legacy") protocol:
//   text frame   = JSON {"channel","header","parent_header","metadata","content","buffers"?}
//   binary frame = u32be nbufs, u32be offset[nbufs], JSON (without buffers), buffer_1..n
//                  (nbufs = 1 + number of buffers, offset[0] = 4*(nbufs+1))
// v1.kernel.websocket.jupyter.org (always binary):
//   u64le offset_number (= 6 + number of buffers), u64le offset[offset_number],
//   channel, header, parent_header, metadata, content, buffers…;
//   offset[0] = 8*(1+offset_number), offset[offset_number-1] = frame length.

#include "cellgate/protocol/message.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::messaging {

// The subprotocol name of the v1 framing, echoed only when a client offers it.
inline constexpr const char* v1_subprotocol = "v1.kernel.websocket.jupyter.org";

enum class channel { shell, iopub, stdin_, control };

std::optional<channel> channel_from(std::string_view name) noexcept;
std::string_view to_string(channel c) noexcept;

struct codec_limits {
    std::size_t max_frame_bytes = 64u << 20;  // checked by the WebSocket layer too
    std::size_t max_buffers = 64;
};

// A message from a client, ready to be signed and sent to the kernel: the four
// JSON parts are exact UTF-8 JSON object texts; signing uses them as they are.
struct client_message {
    channel chan = channel::shell;
    std::string header, parent_header, metadata, content;
    std::vector<std::string> buffers;
    std::string msg_id;    // from the header
    std::string msg_type;  // from the header
};

struct decode_result {
    bool ok = false;
    std::string error;  // human-readable, safe to send back to the client
    client_message msg;
};

// Clients may send on shell, control and stdin only; iopub or an unknown
// channel is an error. The header must be an object with string msg_id and
// msg_type; parent_header, metadata and content must be objects (missing ones
// default to {}).
decode_result decode_json_text(std::string_view text, const codec_limits& limits = {});
decode_result decode_json_binary(std::string_view frame, const codec_limits& limits = {});
decode_result decode_v1(std::string_view frame, const codec_limits& limits = {});

// Server → client. The parts are spliced in as they came from the kernel
// (already validated JSON objects), never re-serialised.
struct outgoing_view {
    channel chan;
    std::string_view header, parent_header, metadata, content;
    const std::vector<std::string>* buffers = nullptr;  // may be null
    std::string_view msg_id, msg_type;
};

// Legacy protocol: a text frame when there are no buffers, else a binary frame.
struct encoded_frame {
    std::string bytes;
    bool binary = false;
};
encoded_frame encode_json(const outgoing_view& m);
std::string encode_v1(const outgoing_view& m);

}  // namespace cellgate::messaging
