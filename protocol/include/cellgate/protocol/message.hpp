#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace cellgate::protocol {

// One Jupyter message as it travels on the ZMQ wire: the routing prefix, then
// the four JSON parts kept as the exact bytes that were signed, then buffers.
// Move-only in spirit: parts can be megabytes, so pass it by value and move.
struct message {
    std::vector<std::string> identities;
    std::string header;
    std::string parent_header = "{}";
    std::string metadata = "{}";
    std::string content = "{}";
    std::vector<std::string> buffers;
};

// The fields of a header that routing needs, read once when a message is decoded.
struct header_fields {
    std::string msg_id;
    std::string msg_type;
    std::string session;
    std::string parent_msg_id;  // "" when the parent header is empty
};

// A random UUID4 in its canonical 36-character form.
std::string make_uuid();

// Now, as ISO 8601 with microseconds and a 'Z' (the format Jupyter uses).
std::string now_iso8601();

// Builds a new message with a fresh header. `parent` is the raw parent header
// JSON ("{}" for none).
message make_message(std::string_view msg_type, const nlohmann::json& content,
                     std::string_view session, std::string_view username = "cellgate",
                     std::string parent = "{}");

inline constexpr std::string_view protocol_version = "5.3";

}  // namespace cellgate::protocol
