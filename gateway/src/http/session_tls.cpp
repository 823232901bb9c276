// http_session on TLS, in a unit of its own (handoffs.hpp says why).
#include "http/http_session.hpp"

namespace cellgate::http {

void start_tls_session(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& tls, server_context& ctx,
                       connection_limiter::slot slot, std::string remote) {
    std::make_shared<http_session<tls_stream>>(tls_stream(plain_stream(std::move(socket)), tls), ctx, std::move(slot),
                                               std::move(remote))
        ->run();
}

}  // namespace cellgate::http
