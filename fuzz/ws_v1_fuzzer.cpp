// libFuzzer target: the v1.kernel.websocket.jupyter.org framing. Beyond "no
// crash", a frame that decodes must re-encode to the same parts, and its raw
// parts must splice into a legacy frame that a client can decode: v1 keeps the
// parts byte for byte, so this is where a loose validity check would show.

#include "messaging/ws_codec.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

using namespace cellgate::messaging;

outgoing_view view_of(const client_message& m) {
    outgoing_view v{};
    v.chan = m.chan;
    v.header = m.header;
    v.parent_header = m.parent_header;
    v.metadata = m.metadata;
    v.content = m.content;
    v.buffers = &m.buffers;
    v.msg_id = m.msg_id;
    v.msg_type = m.msg_type;
    return v;
}

// nlohmann refuses this text only because a number in it is out of a double's range.
bool overflows_a_double(const std::string& text) {
    try {
        (void)nlohmann::json::parse(text);
    } catch (const nlohmann::json::out_of_range& e) {
        return e.id == 406;
    } catch (const nlohmann::json::exception&) {
    }
    return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto r = decode_v1(std::string_view(reinterpret_cast<const char*>(data), size));
    if (!r.ok) {
        if (r.error.empty()) __builtin_trap();
        return 0;
    }
    const client_message& m = r.msg;
    if (!r.error.empty() || m.chan == channel::iopub || m.msg_type.empty()) __builtin_trap();

    const auto again = decode_v1(encode_v1(view_of(m)));
    if (!again.ok || again.msg.chan != m.chan || again.msg.header != m.header ||
        again.msg.parent_header != m.parent_header || again.msg.metadata != m.metadata ||
        again.msg.content != m.content || again.msg.buffers != m.buffers ||
        again.msg.msg_id != m.msg_id || again.msg.msg_type != m.msg_type)
        __builtin_trap();

    // The legacy decoder builds a nlohmann DOM, so it refuses two things v1
    // passes through untouched: deep nesting, and numbers that overflow a
    // double (1e999), which protocol::is_valid_json takes as RFC 8259 and
    // JSON.parse do. Anything else it refuses is a disagreement.
    const auto f = encode_json(view_of(m));
    const auto legacy = f.binary ? decode_json_binary(f.bytes) : decode_json_text(f.bytes);
    if (!legacy.ok && legacy.error != "JSON nested too deeply" &&
        !(legacy.error == "message is not valid JSON" &&
          (overflows_a_double(m.parent_header) || overflows_a_double(m.metadata) || overflows_a_double(m.content))))
        __builtin_trap();
    if (legacy.ok && (legacy.msg.msg_id != m.msg_id || legacy.msg.msg_type != m.msg_type ||
                      legacy.msg.buffers != m.buffers))
        __builtin_trap();
    return 0;
}
