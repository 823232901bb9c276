// A kernel's WebSocket on the tls stream, in a unit of its own (handoffs.hpp).
#include "http/websocket_session.hpp"

#include <boost/beast/websocket/ssl.hpp>

namespace cellgate::http {

template void start_websocket_session<tls_stream>(tls_stream&&, server_context&, connection_limiter::slot,
                                                  std::shared_ptr<kernels::kernel>, std::string, bool, request);

}  // namespace cellgate::http
