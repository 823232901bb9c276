#include "relay/relay_protocol.hpp"

namespace cellgate::launcher::relay {

namespace {

void put_u32(std::string& out, std::uint32_t v) {
    out.push_back(static_cast<char>(v >> 24));
    out.push_back(static_cast<char>(v >> 16));
    out.push_back(static_cast<char>(v >> 8));
    out.push_back(static_cast<char>(v));
}

}  // namespace

std::uint32_t read_u32(std::string_view b) {
    return (static_cast<std::uint32_t>(static_cast<unsigned char>(b[0])) << 24) |
           (static_cast<std::uint32_t>(static_cast<unsigned char>(b[1])) << 16) |
           (static_cast<std::uint32_t>(static_cast<unsigned char>(b[2])) << 8) |
           static_cast<std::uint32_t>(static_cast<unsigned char>(b[3]));
}

void append_frame(std::string& out, frame_type type, std::uint32_t stream, std::string_view payload) {
    out.push_back(static_cast<char>(type));
    put_u32(out, stream);
    put_u32(out, static_cast<std::uint32_t>(payload.size()));
    out.append(payload);
}

void append_credit(std::string& out, std::uint32_t stream, std::uint32_t bytes) {
    std::string payload;
    put_u32(payload, bytes);
    append_frame(out, frame_type::credit, stream, payload);
}

std::optional<std::string> parse_header(std::string_view bytes, frame_header& out) {
    const auto type = static_cast<unsigned char>(bytes[0]);
    out.stream = read_u32(bytes.substr(1));
    out.length = read_u32(bytes.substr(5));
    // reset (7) only ever goes to the sandbox: from it, it is unknown.
    if (type < 1 || type > 6) return "unknown frame type " + std::to_string(type);
    out.type = static_cast<frame_type>(type);
    const bool stream_zero = out.type == frame_type::hello || out.type == frame_type::ready;
    if (stream_zero != (out.stream == 0))
        return std::string(to_string(out.type)) + " frame on stream " + std::to_string(out.stream);
    std::uint32_t min = 0;
    std::uint32_t max = 0;
    switch (out.type) {
    case frame_type::hello: min = max = static_cast<std::uint32_t>(hello_payload.size()); break;
    case frame_type::ready: break;
    case frame_type::open: min = max = 1; break;
    case frame_type::data: min = 1; max = max_data_bytes; break;
    case frame_type::credit: min = max = 4; break;
    case frame_type::close:
    case frame_type::reset: break;
    }
    if (out.length < min || out.length > max)
        return std::string(to_string(out.type)) + " frame of " + std::to_string(out.length) + " bytes";
    return std::nullopt;
}

std::string_view to_string(frame_type t) noexcept {
    switch (t) {
    case frame_type::hello: return "hello";
    case frame_type::ready: return "ready";
    case frame_type::open: return "open";
    case frame_type::data: return "data";
    case frame_type::credit: return "credit";
    case frame_type::close: return "close";
    case frame_type::reset: return "reset";
    }
    return "unknown";
}

}  // namespace cellgate::launcher::relay
