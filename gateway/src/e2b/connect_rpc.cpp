#include "e2b/connect_rpc.hpp"

#include "util/api_error.hpp"

namespace cellgate::e2b::connect {

using nlohmann::json;

std::string envelope(const json& message, unsigned char flags) {
    const auto payload = message.dump(-1, ' ', false, json::error_handler_t::replace);
    const auto n = static_cast<std::uint32_t>(payload.size());
    std::string out;
    out.reserve(5 + payload.size());
    out += static_cast<char>(flags);
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xff);
    out += payload;
    return out;
}

std::string end_stream(std::optional<std::pair<std::string_view, std::string>> error) {
    if (!error) return envelope(json::object(), end_stream_flag);
    return envelope({{"error", {{"code", error->first}, {"message", error->second}}}}, end_stream_flag);
}

json request_message(std::string_view body) {
    if (body.size() < 5) throw api_exception(400, "A streaming request holds one Connect envelope");
    const auto flags = static_cast<unsigned char>(body[0]);
    if ((flags & 0x01) != 0) throw api_exception(400, "Compressed Connect messages are not accepted");
    std::uint32_t n = 0;
    for (std::size_t i = 1; i <= 4; ++i) n = (n << 8) | static_cast<unsigned char>(body[i]);
    if (n > max_request_message_bytes || body.size() != 5 + static_cast<std::size_t>(n))
        throw api_exception(400, "The Connect envelope's length does not match the body");
    const auto payload = body.substr(5);
    if (!protocol::json_nesting_within(payload, http::max_body_json_depth))
        throw api_exception(400, "The message is nested too deeply");
    auto j = json::parse(payload, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw api_exception(400, "The message is not a JSON object");
    return j;
}

http::response stream_response(std::function<void(std::shared_ptr<http::stream_sink>)> start) {
    http::response res;
    res.content_type = "application/connect+json";
    res.stream = std::move(start);
    return res;
}

}  // namespace cellgate::e2b::connect
