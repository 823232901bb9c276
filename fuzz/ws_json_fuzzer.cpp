// libFuzzer target: the default ("legacy") kernel WebSocket protocol, both its
// text and its binary framing, on the same bytes. Beyond "no crash", a frame
// that decodes must survive the server's encoder and decode to the same parts.

#include "messaging/ws_codec.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

using namespace cellgate::messaging;

void check(const decode_result& r) {
    if (!r.ok) {
        if (r.error.empty()) __builtin_trap();
        return;
    }
    const client_message& m = r.msg;
    if (!r.error.empty() || m.chan == channel::iopub || m.msg_type.empty()) __builtin_trap();

    outgoing_view v{};
    v.chan = m.chan;
    v.header = m.header;
    v.parent_header = m.parent_header;
    v.metadata = m.metadata;
    v.content = m.content;
    v.buffers = &m.buffers;
    v.msg_id = m.msg_id;
    v.msg_type = m.msg_type;
    const auto f = encode_json(v);
    const auto again = f.binary ? decode_json_binary(f.bytes) : decode_json_text(f.bytes);
    if (!again.ok || again.msg.chan != m.chan || again.msg.header != m.header ||
        again.msg.parent_header != m.parent_header || again.msg.metadata != m.metadata ||
        again.msg.content != m.content || again.msg.buffers != m.buffers ||
        again.msg.msg_id != m.msg_id || again.msg.msg_type != m.msg_type)
        __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view frame(reinterpret_cast<const char*>(data), size);
    check(decode_json_text(frame));
    check(decode_json_binary(frame));
    return 0;
}
