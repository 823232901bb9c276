// A kernel's WebSocket on the plain stream, in a unit of its own (handoffs.hpp).
#include "http/websocket_session.hpp"

namespace cellgate::http {

template void start_websocket_session<plain_stream>(plain_stream&&, server_context&, connection_limiter::slot,
                                                  std::shared_ptr<kernels::kernel>, std::string, bool, request);

}  // namespace cellgate::http
