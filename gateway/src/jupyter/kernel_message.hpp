#pragma once

#include "cellgate/protocol/message.hpp"
#include "jupyter/ws_codec.hpp"

#include <memory>

namespace cellgate::jupyter {

// A verified message from a kernel, shared read-only between every client it
// is fanned out to (parts can be megabytes; they are never copied per client).
struct kernel_message {
    jupyter::channel chan = jupyter::channel::iopub;
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
    jupyter::outgoing_view view() const noexcept {
        return {chan,          msg.header,    msg.parent_header, msg.metadata,
                msg.content,   &msg.buffers,  fields.msg_id,     fields.msg_type};
    }
};

using kernel_message_ptr = std::shared_ptr<const kernel_message>;

}  // namespace cellgate::jupyter
