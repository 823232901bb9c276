#pragma once

#include "messaging/kernel_message.hpp"

#include <string>

namespace cellgate::kernels {

// Something that receives a kernel's messages: a WebSocket connection, or the
// agent API's execution collector. Both calls are made from other threads
// (often under the kernel's lock), so an implementation only queues: it must
// not call back into the kernel from inside them.
class kernel_subscriber {
public:
    virtual ~kernel_subscriber() = default;
    virtual void deliver(messaging::kernel_message_ptr message) = 0;
    // The kernel is going away for good (deleted, culled, shut down).
    virtual void kernel_closed(const std::string& reason) = 0;
};

}  // namespace cellgate::kernels
