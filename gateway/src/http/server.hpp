#pragma once

#include "http/auth.hpp"
#include "http/router.hpp"
#include "kernels/kernel_manager.hpp"
#include "metrics/metrics.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cellgate::http {

struct server_options {
    std::string ip = "127.0.0.1";
    unsigned short port = 8888;
    std::vector<std::string> allow_origins;
    std::size_t max_body_bytes = 256u << 20;
    std::size_t max_header_bytes = 64u << 10;
    std::chrono::seconds request_timeout{60};
    // WebSocket
    std::size_t max_ws_message_bytes = 64u << 20;  // larger: closed with 1009
    std::size_t max_ws_queue_bytes = 64u << 20;    // a client this far behind is closed with 1013
    std::chrono::seconds ws_idle_timeout{120};     // pings are sent at half of it
};

// Something that can be closed on shutdown (a live WebSocket).
class closable {
public:
    virtual ~closable() = default;
    virtual void shutdown(const std::string& reason) = 0;
};

// What request handling needs, shared by every connection.
struct server_context {
    server_options options;
    authenticator auth;
    router routes;
    kernels::kernel_manager& kernels;
    metrics::registry& metrics;

    // Live WebSockets, so shutdown can close them.
    std::mutex live_mutex;
    std::set<std::weak_ptr<closable>, std::owner_less<std::weak_ptr<closable>>> live;
    void track(const std::shared_ptr<closable>& c);
    void untrack(const std::shared_ptr<closable>& c);
};

// The listener: accepts TCP (optionally TLS) connections and runs an HTTP
// session on each; WebSocket upgrades for kernel channels are handed over to
// a channels session.
class server {
public:
    server(boost::asio::io_context& ioc, server_context& ctx, std::shared_ptr<boost::asio::ssl::context> tls);
    ~server();
    // Binds and starts accepting; returns the bound port.
    unsigned short listen();
    // Stops accepting and closes every WebSocket.
    void stop();

private:
    struct impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace cellgate::http
