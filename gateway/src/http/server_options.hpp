#pragma once

// The HTTP surface's limits and settings, as the command line and the config
// file give them. No Beast here: configuration parsing includes this alone.

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace cellgate::http {

struct server_options {
    std::string ip = "127.0.0.1";
    unsigned short port = 8888;
    std::vector<std::string> allow_origins;
    std::size_t max_body_bytes = 256u << 20;        // authenticated requests only
    std::size_t max_public_body_bytes = 64u << 10;  // routes that need no token (their requests have no body)
    std::size_t max_header_bytes = 64u << 10;
    std::chrono::seconds header_timeout{30};   // from connection (or the previous response) to a complete header
    std::chrono::seconds request_timeout{60};  // for the body, once the headers are accepted
    // Connections: a client that opens more waits for none; it is answered
    // 503 and closed at once, so idle sockets cannot use up the gateway's fds.
    std::size_t max_connections = 4096;
    std::size_t max_connections_per_address = 512;
    // Addresses whose connections count only against the total, not per
    // address: the cluster's routers and peer nodes, which carry many
    // clients (--trusted-proxy). Each tenant's WebSockets are capped instead.
    std::vector<std::string> trusted_proxies;
    std::size_t max_websockets_per_tenant = 256;  // kernel channels and terminals, open at once
    std::size_t max_auth_failures = 20;  // in a row from one address; one more forgiven each second
    // WebSocket
    std::size_t max_ws_message_bytes = 64u << 20;  // larger: closed with 1009
    // A message to an endpoint of small text messages (terminals): larger
    // closes the socket with 1009.
    std::size_t max_socket_message_bytes = 1u << 20;
    std::size_t max_ws_queue_bytes = 64u << 20;    // a client this far behind is closed with 1013
    std::chrono::seconds ws_idle_timeout{120};     // pings are sent at half of it
    // Server-Sent Events: a stream whose client falls this far behind is ended
    // (a last `stream_error` event, then the connection closes) and its cell
    // interrupted.
    std::size_t max_sse_queue_bytes = 16u << 20;
};

}  // namespace cellgate::http
