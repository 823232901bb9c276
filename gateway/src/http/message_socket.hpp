#pragma once

// One client's WebSocket on an endpoint of text messages (router::add_socket,
// e.g. Jupyter's terminals), as opposed to the kernel channels'
// websocket_session. Stream-generic (plain TCP or TLS); everything runs on the
// connection's strand. The endpoint's peer gets each text message; what it
// sends through the link waits in a queue bounded by max_ws_queue_bytes, past
// which the client is closed with 1013 (it may reconnect: the endpoint decides
// what a new connection is replayed). Binary frames are refused (1003), and a
// message over max_socket_message_bytes closes the socket (1009).

#include "http/connection_limiter.hpp"
#include "http/handoffs.hpp"
#include "http/server_context.hpp"

#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <deque>

namespace cellgate::http {

template <class Stream>
class message_socket : public socket_link,
                       public closable,
                       public std::enable_shared_from_this<message_socket<Stream>> {
    using ws_stream = boost::beast::websocket::stream<Stream>;
    using close_code = boost::beast::websocket::close_code;

public:
    message_socket(Stream&& stream, server_context& ctx, connection_limiter::slot slot, std::string route,
                   std::function<std::shared_ptr<socket_peer>(std::shared_ptr<socket_link>)> open)
        : ws_(std::move(stream)), ctx_(ctx), slot_(std::move(slot)), route_(std::move(route)), open_(std::move(open)) {}

    void run(request req) {
        namespace websocket = boost::beast::websocket;
        ws_.set_option(websocket::stream_base::timeout{std::chrono::seconds(30), ctx_.options.ws_idle_timeout, true});
        ws_.read_message_max(std::min(ctx_.options.max_socket_message_bytes, ctx_.options.max_ws_message_bytes));
        ws_.set_option(websocket::stream_base::decorator(
            [](websocket::response_type& res) { res.set(boost::beast::http::field::server, "cellgate"); }));
        ws_.async_accept(req, boost::beast::bind_front_handler(&message_socket::on_accept, this->shared_from_this()));
    }

    void send(std::string text) override {
        inbound_ += text.size();
        boost::asio::post(ws_.get_executor(), [self = this->shared_from_this(), text = std::move(text)]() mutable {
            self->inbound_ -= text.size();
            if (self->closing_) return;
            self->queued_ += text.size();
            self->queue_.push_back(std::move(text));
            if (self->queued_ + self->inbound_ > self->ctx_.options.max_ws_queue_bytes) {
                ++self->ctx_.metrics.ws_slow_client_closes;
                spdlog::warn("{}: a client fell {} bytes behind; closing it with 1013", self->route_, self->queued_);
                return self->close_with(close_code::try_again_later, "client too slow: reconnect");
            }
            if (!self->writing_) self->do_write();
        });
    }

    void close(const std::string& reason) override { close_with_code(close_code::normal, reason); }

    void close_with_code(std::uint16_t code, const std::string& reason) override {
        boost::asio::post(ws_.get_executor(), [self = this->shared_from_this(), code, reason] {
            if (self->close_after_writes_) return;  // the first close stands
            self->close_after_writes_ = true;
            self->close_code_ = code;
            self->close_reason_ = reason;
            if (!self->writing_) self->do_write();
        });
    }

    void shutdown(const std::string& reason) override {
        boost::asio::post(ws_.get_executor(), [self = this->shared_from_this(), reason] {
            self->close_with(close_code::going_away, reason);
        });
    }

private:
    void on_accept(boost::beast::error_code ec) {
        if (ec) return;
        ++ctx_.metrics.ws_connections;
        counted_ = true;
        ctx_.track(this->shared_from_this());
        peer_ = open_(this->shared_from_this());
        open_ = nullptr;
        if (!peer_) return close_with(close_code::try_again_later, "the endpoint is gone");
        do_read();
    }

    void do_read() {
        ws_.async_read(buffer_, boost::beast::bind_front_handler(&message_socket::on_read, this->shared_from_this()));
    }

    void on_read(boost::beast::error_code ec, std::size_t) {
        if (ec) return finish();
        if (ws_.got_binary()) {
            buffer_.consume(buffer_.size());
            return close_with(close_code::unknown_data, "this endpoint takes text messages");
        }
        auto text = boost::beast::buffers_to_string(buffer_.cdata());
        buffer_.consume(buffer_.size());
        if (peer_) peer_->received(std::move(text));
        if (!closing_) do_read();
    }

    void do_write() {
        if (closing_) return;
        if (queue_.empty()) {
            writing_ = false;
            if (close_after_writes_) close_with(static_cast<close_code>(close_code_), close_reason_);
            return;
        }
        writing_ = true;
        current_ = std::move(queue_.front());
        queue_.pop_front();
        queued_ -= current_.size();
        ws_.text(true);
        ws_.async_write(boost::asio::buffer(current_),
                        boost::beast::bind_front_handler(&message_socket::on_write, this->shared_from_this()));
    }

    void on_write(boost::beast::error_code ec, std::size_t) {
        current_.clear();
        if (ec) return finish();
        do_write();
    }

    void close_with(close_code code, const std::string& reason) {
        if (closing_) return;
        closing_ = true;
        ws_.async_close(boost::beast::websocket::close_reason(code, reason.substr(0, 120)),
                        [self = this->shared_from_this()](boost::beast::error_code) { self->finish(); });
    }

    void finish() {
        if (finished_) return;
        finished_ = true;
        closing_ = true;
        queue_.clear();
        if (counted_) --ctx_.metrics.ws_connections;
        ctx_.untrack(this->shared_from_this());
        if (auto p = std::move(peer_)) p->closed();  // the peer holds the link: the cycle ends here
    }

    ws_stream ws_;
    server_context& ctx_;
    connection_limiter::slot slot_;
    const std::string route_;
    std::function<std::shared_ptr<socket_peer>(std::shared_ptr<socket_link>)> open_;
    std::shared_ptr<socket_peer> peer_;
    boost::beast::flat_buffer buffer_;
    std::deque<std::string> queue_;
    std::string current_, close_reason_;
    std::size_t queued_ = 0;
    std::uint16_t close_code_ = close_code::normal;
    std::atomic<std::size_t> inbound_{0};  // posted by send(), not yet on the strand
    bool writing_ = false, closing_ = false, finished_ = false, counted_ = false, close_after_writes_ = false;
};

template <class Stream>
void start_message_socket(Stream&& stream, server_context& ctx, connection_limiter::slot slot, std::string route,
                          std::function<std::shared_ptr<socket_peer>(std::shared_ptr<socket_link>)> open,
                          request req) {
    std::make_shared<message_socket<Stream>>(std::move(stream), ctx, std::move(slot), std::move(route), std::move(open))
        ->run(std::move(req));
}

}  // namespace cellgate::http
