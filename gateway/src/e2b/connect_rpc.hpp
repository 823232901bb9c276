#pragma once

// The Connect protocol as E2B's SDKs speak it to envd: JSON messages
// (connectrpc.com/docs/protocol). Unary calls are a plain JSON POST and a
// 200 JSON answer; a server stream answers `application/connect+json`
// envelopes (a flag byte, a 4-byte big-endian length, the message) and ends
// with one end-stream envelope (flag 0x02) holding {} or {"error": …}.

#include "http/http_types.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace cellgate::e2b::connect {

inline constexpr unsigned char end_stream_flag = 0x02;
inline constexpr std::size_t max_request_message_bytes = 4u << 20;

std::string envelope(const nlohmann::json& message, unsigned char flags = 0);
std::string end_stream(std::optional<std::pair<std::string_view, std::string>> error = std::nullopt);

// The one message of a streaming request's body; throws api_exception(400)
// when it is not exactly one well-formed, uncompressed JSON envelope.
nlohmann::json request_message(std::string_view body);

// A streaming response whose body `start` writes through the sink.
http::response stream_response(std::function<void(std::shared_ptr<http::stream_sink>)> start);

}  // namespace cellgate::e2b::connect
