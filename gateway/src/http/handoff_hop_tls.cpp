// A hop to the id's owner from the tls stream, in a unit of its own (handoffs.hpp).
#include "http/hop_session.hpp"

namespace cellgate::http {

template void start_hop_session<tls_stream>(tls_stream&&, connection_limiter::slot, std::string, std::string,
                                            std::string, std::string, unsigned);

}  // namespace cellgate::http
