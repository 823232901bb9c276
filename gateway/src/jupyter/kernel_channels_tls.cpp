// A kernel's WebSocket on the tls stream, in a unit of its own (http/handoffs.hpp).
#include "jupyter/kernel_channels.hpp"

#include <boost/beast/websocket/ssl.hpp>

namespace cellgate::jupyter {

template void start_kernel_channels<http::tls_stream>(http::tls_stream&&, server_context&, connection_limiter::slot,
                                                       std::shared_ptr<void>, request);

}  // namespace cellgate::jupyter
