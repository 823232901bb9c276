#pragma once

#include "cellgate/protocol/message.hpp"
#include "messaging/ws_codec.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace cellgate::messaging {

// A verified message from a kernel, shared read-only between every client it
// is fanned out to (parts can be megabytes; they are never copied per client).
struct kernel_message {
    messaging::channel chan = messaging::channel::iopub;
    protocol::message msg;
    protocol::header_fields fields;
    // Order of arrival at its kernel, set once under the kernel's lock before
    // the message is shared; buffers keep it sorted so nothing is reordered
    // when undelivered messages are handed back.
    std::uint64_t seq = 0;

    std::size_t wire_bytes() const noexcept {
        std::size_t n = msg.header.size() + msg.parent_header.size() + msg.metadata.size() +
                        msg.content.size();
        for (const auto& b : msg.buffers) n += b.size();
        return n;
    }
    messaging::outgoing_view view() const noexcept {
        return {chan,          msg.header,    msg.parent_header, msg.metadata,
                msg.content,   &msg.buffers,  fields.msg_id,     fields.msg_type};
    }
};

using kernel_message_ptr = std::shared_ptr<const kernel_message>;

// A message the gateway makes up for its clients (a status, a notice, a
// reply the kernel will never send), with its fields filled in; the kernel
// numbers it (seq) when it sends it. `parent_header` is raw JSON ("{}": none).
std::shared_ptr<kernel_message> make_gateway_message(channel chan, std::string_view msg_type,
                                                     const nlohmann::json& content, std::string_view session,
                                                     const std::string& parent_header = "{}");

}  // namespace cellgate::messaging
