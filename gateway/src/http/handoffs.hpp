#pragma once

// Where a connection goes once its head is read, besides a plain answer: the
// kernel channels' WebSocket (a surface's), a message socket (terminals and the like), or a hop to
// the node that owns the id. Each kind is compiled for each stream in a unit
// of its own (handoff_<kind>_<stream>.cpp), and each stream's http_session in
// another (session_<stream>.cpp), so no unit instantiates all of Beast at
// once: together in listener.cpp they took a cold build's longest unit, 4 to 8
// minutes at 7 GB.

#include "http/connection_limiter.hpp"
#include "http/http_types.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace cellgate::http {

struct server_context;

// The streams a connection comes on.
using plain_stream = boost::beast::tcp_stream;
using tls_stream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

// An http_session on a new connection (session_plain.cpp, session_tls.cpp).
void start_plain_session(boost::asio::ip::tcp::socket socket, server_context& ctx, connection_limiter::slot slot,
                         std::string remote);
void start_tls_session(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& tls, server_context& ctx,
                       connection_limiter::slot slot, std::string remote);

// The kernel channels' WebSocket (dispatch.hpp: channels_pattern), which a
// surface takes over (the Jupyter surface's: jupyter/kernel_channels.hpp).
// `admit` answers the upgrade request before the handshake: its refusal, or
// nothing, with what it accepted in `accepted` for the socket. `plain` and
// `tls` take the stream over, one per stream, each in a unit of its own.
struct channel_upgrade {
    std::function<std::optional<response>(const request_ptr& ctx, std::shared_ptr<void>& accepted)> admit;
    std::function<void(plain_stream&&, server_context&, connection_limiter::slot, std::shared_ptr<void>, request)> plain;
    std::function<void(tls_stream&&, server_context&, connection_limiter::slot, std::shared_ptr<void>, request)> tls;
};
// message_socket.hpp
template <class Stream>
void start_message_socket(Stream&& stream, server_context& ctx, connection_limiter::slot slot, std::string route,
                          std::function<std::shared_ptr<socket_peer>(std::shared_ptr<socket_link>)> open,
                          request req);
// hop_session.hpp
template <class Stream>
void start_hop_session(Stream&& client, connection_limiter::slot slot, std::string head, std::string already,
                       std::string address, std::string tag, unsigned version);

}  // namespace cellgate::http
