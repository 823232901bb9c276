#pragma once

// Accepts TCP (optionally TLS) connections and runs an http_session on each.
// Every connection takes a slot from the server context's connection_limiter
// first; one over the cap is answered 503 and closed. An accept that fails
// for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) waits a
// moment before the next try instead of spinning, and says so in the log
// once per interval, with a count.

#include "http/server_context.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>

#include <memory>

namespace cellgate::http {

class listener {
public:
    listener(boost::asio::io_context& ioc, server_context& ctx, std::shared_ptr<boost::asio::ssl::context> tls);
    ~listener();
    // Binds and starts accepting; returns the bound port.
    unsigned short listen();
    // Stops accepting and closes every WebSocket.
    void stop();

private:
    struct impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace cellgate::http
