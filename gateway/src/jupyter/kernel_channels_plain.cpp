// A kernel's WebSocket on the plain stream, in a unit of its own (http/handoffs.hpp).
#include "jupyter/kernel_channels.hpp"

namespace cellgate::jupyter {

template void start_kernel_channels<http::plain_stream>(http::plain_stream&&, server_context&, connection_limiter::slot,
                                                       std::shared_ptr<void>, request);

}  // namespace cellgate::jupyter
