#pragma once

// The relay of one client connection to the node that owns the id its
// request names (http/hop.hpp): connect to the owner, send the request's head
// (with X-Cellgate-Hop) and the bytes already read past it, then copy bytes
// both ways until the owner closes: the rest of the body, the answer, and for
// a WebSocket or an event stream, everything after. Stream-generic on the
// client's side (plain TCP or TLS); the owner is reached over plain TCP.
//
// Bounds: the client's connection slot stays held for the relay's life; each
// direction holds at most one 16 KiB buffer (a reader waits for its write,
// so a slow side slows the other instead of queueing); the connect has 5 s;
// a direction idle for an hour ends the relay.

#include "http/connection_limiter.hpp"
#include "http/handoffs.hpp"
#include "http/http_types.hpp"
#include "metrics/metrics.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <array>

namespace cellgate::http {

template <class Stream>
class hop_session : public std::enable_shared_from_this<hop_session<Stream>> {
    static constexpr std::chrono::hours idle_limit{1};

public:
    hop_session(Stream&& client, connection_limiter::slot slot, std::string head, std::string already,
                std::string address, std::string tag, unsigned version)
        : client_(std::move(client)),
          owner_(client_.get_executor()),
          resolver_(client_.get_executor()),
          slot_(std::move(slot)),
          head_(std::move(head)),
          address_(std::move(address)),
          tag_(std::move(tag)),
          version_(version) {
        head_ += already;
    }

    void run() {
        const auto colon = address_.rfind(':');
        if (colon == std::string::npos || colon == 0) return refuse("its address '" + address_ + "' is not host:port");
        auto host = address_.substr(0, colon);
        if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
        resolver_.async_resolve(host, address_.substr(colon + 1),
                                [self = this->shared_from_this()](boost::beast::error_code ec, auto results) {
                                    if (ec) return self->refuse(ec.message());
                                    self->owner_.expires_after(std::chrono::seconds(5));
                                    self->owner_.async_connect(results, [self](boost::beast::error_code e, const auto&) {
                                        if (e) return self->refuse(e.message());
                                        self->send_head();
                                    });
                                });
    }

private:
    // The owner could not be reached: 502, and the client's connection ends.
    void refuse(const std::string& why) {
        spdlog::warn("hop: node {} at {} did not answer: {}", tag_, address_, why);
        auto r = error_response(502, "The node that holds this id (" + tag_ + ") did not answer: " + why);
        auto res = std::make_shared<bhttp::response<bhttp::string_body>>(bhttp::status::bad_gateway, version_);
        res->set(bhttp::field::content_type, r.content_type);
        res->body() = std::move(r.body);
        res->prepare_payload();
        res->keep_alive(false);
        boost::beast::get_lowest_layer(client_).expires_after(std::chrono::seconds(30));
        bhttp::async_write(client_, *res, [self = this->shared_from_this(), res](boost::beast::error_code, std::size_t) {
            self->close_client();
        });
    }

    void send_head() {
        owner_.expires_after(std::chrono::seconds(30));
        boost::asio::async_write(owner_, boost::asio::buffer(head_),
                                 [self = this->shared_from_this()](boost::beast::error_code ec, std::size_t) {
                                     if (ec) return self->refuse(ec.message());
                                     self->head_.clear();
                                     self->head_.shrink_to_fit();
                                     self->pump_up();
                                     self->pump_down();
                                 });
    }

    // Client → owner. The client's end of input half-closes the owner's side.
    void pump_up() {
        boost::beast::get_lowest_layer(client_).expires_after(idle_limit);
        client_.async_read_some(boost::asio::buffer(up_), [self = this->shared_from_this()](boost::beast::error_code ec,
                                                                                            std::size_t n) {
            if (ec) {
                boost::beast::error_code ignored;
                if (!self->done_) self->owner_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
                return;
            }
            self->owner_.expires_after(idle_limit);
            boost::asio::async_write(self->owner_, boost::asio::buffer(self->up_.data(), n),
                                     [self](boost::beast::error_code e, std::size_t) {
                                         if (!e && !self->done_) self->pump_up();
                                     });
        });
    }

    // Owner → client. The owner's close (after its answer, or the end of a
    // WebSocket) ends the relay.
    void pump_down() {
        owner_.expires_after(idle_limit);
        owner_.async_read_some(boost::asio::buffer(down_), [self = this->shared_from_this()](boost::beast::error_code ec,
                                                                                             std::size_t n) {
            if (ec) return self->finish();
            boost::beast::get_lowest_layer(self->client_).expires_after(idle_limit);
            boost::asio::async_write(self->client_, boost::asio::buffer(self->down_.data(), n),
                                     [self](boost::beast::error_code e, std::size_t) {
                                         if (e) return self->finish();
                                         self->pump_down();
                                     });
        });
    }

    void finish() {
        if (done_) return;
        done_ = true;
        boost::beast::error_code ignored;
        owner_.socket().close(ignored);
        close_client();
    }

    // No TLS close_notify: every answer relayed carries its own length or
    // framing, and the relay's read may still be pending on the stream.
    void close_client() {
        done_ = true;
        boost::beast::error_code ignored;
        auto& socket = boost::beast::get_lowest_layer(client_).socket();
        socket.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
        socket.close(ignored);
    }

    Stream client_;
    boost::beast::tcp_stream owner_;
    boost::asio::ip::tcp::resolver resolver_;
    connection_limiter::slot slot_;
    std::string head_;
    const std::string address_, tag_;
    const unsigned version_;
    std::array<char, 16 * 1024> up_{}, down_{};
    bool done_ = false;
};

template <class Stream>
void start_hop_session(Stream&& client, connection_limiter::slot slot, std::string head, std::string already,
                       std::string address, std::string tag, unsigned version) {
    std::make_shared<hop_session<Stream>>(std::move(client), std::move(slot), std::move(head), std::move(already),
                                          std::move(address), std::move(tag), version)
        ->run();
}

}  // namespace cellgate::http
