// A message socket (terminals and the like) on the tls stream, in a unit of its own (handoffs.hpp).
#include "http/message_socket.hpp"

#include <boost/beast/websocket/ssl.hpp>

namespace cellgate::http {

template void start_message_socket<tls_stream>(tls_stream&&, server_context&, connection_limiter::slot, std::string,
                                               std::function<std::shared_ptr<socket_peer>(std::shared_ptr<socket_link>)>,
                                               request);

}  // namespace cellgate::http
