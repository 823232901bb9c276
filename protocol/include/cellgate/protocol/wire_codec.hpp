#pragma once

#include "cellgate/protocol/hmac_signer.hpp"
#include "cellgate/protocol/message.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::protocol {

// What a kernel may send. Every frame from a sandboxed kernel is hostile input.
struct decode_limits {
    std::size_t max_frames = 64;                       // identities + delimiter + 5 + buffers
    std::size_t max_identities = 8;
    std::size_t max_json_part_bytes = 32u << 20;       // any one of the four JSON parts
    std::size_t max_buffer_bytes = 64u << 20;          // any one binary buffer
    std::size_t max_message_bytes = 96u << 20;         // everything together
};

enum class decode_error {
    none,
    too_many_frames,
    frame_too_large,
    message_too_large,
    no_delimiter,
    too_few_parts,
    bad_signature,
    bad_json,
    bad_schema,
};

std::string_view to_string(decode_error e) noexcept;

struct decode_result {
    decode_error error = decode_error::none;
    std::string detail;       // for the log; never contains key material
    message msg;              // valid only when error == none
    header_fields fields;     // likewise
    explicit operator bool() const noexcept { return error == decode_error::none; }
};

// Decodes `[identities…, "<IDS|MSG>", hmac, header, parent, metadata, content,
// buffers…]`, checking in this order and stopping at the first failure:
// frame count and sizes, delimiter and part count, signature (length first,
// constant time), JSON parse of the four parts, then the schema (a header
// with string msg_id, msg_type, session, username, version; objects for the
// rest). Never throws on bad input.
decode_result decode(std::vector<std::string>&& frames, const hmac_signer& signer,
                     const decode_limits& limits = {});

// Encodes a message into wire frames, signing it.
std::vector<std::string> encode(const message& msg, const hmac_signer& signer);

inline constexpr std::string_view delimiter = "<IDS|MSG>";

}  // namespace cellgate::protocol
