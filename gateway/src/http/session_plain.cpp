// http_session on plain TCP, in a unit of its own (handoffs.hpp says why).
#include "http/http_session.hpp"

namespace cellgate::http {

void start_plain_session(boost::asio::ip::tcp::socket socket, server_context& ctx, connection_limiter::slot slot,
                         std::string remote) {
    std::make_shared<http_session<plain_stream>>(plain_stream(std::move(socket)), ctx, std::move(slot),
                                                 std::move(remote))
        ->run();
}

}  // namespace cellgate::http
