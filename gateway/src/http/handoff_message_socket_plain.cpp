// A message socket (terminals and the like) on the plain stream, in a unit of its own (handoffs.hpp).
#include "http/message_socket.hpp"

namespace cellgate::http {

template void start_message_socket<plain_stream>(plain_stream&&, server_context&, connection_limiter::slot, std::string,
                                               std::function<std::shared_ptr<socket_peer>(std::shared_ptr<socket_link>)>,
                                               request);

}  // namespace cellgate::http
