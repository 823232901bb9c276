#pragma once

// One client's WebSocket on /api/kernels/{id}/channels, which the transport
// hands over (http/handoffs.hpp: channel_upgrade; kernel_channels() in
// jupyter_api.hpp makes the hooks). Stream-generic (plain TCP or TLS). Everything runs on the connection's strand; the kernel reaches
// it only through deliver()/kernel_closed(), which post to that strand.
//
// Slow clients: outgoing messages wait in a queue of kernel messages that are
// encoded only when written. If the queue grows past max_ws_queue_bytes the
// connection is closed with 1013 (try again later) and every unsent message
// goes back to the session's buffer, so a client that reconnects with the same
// session_id receives them; nothing is dropped silently. The queue counts what
// is still on its way to the strand, and a fixed cost per message besides its
// bytes (a flood of tiny messages holds more memory than its bytes say).

#include "http/connection_limiter.hpp"
#include "http/handoffs.hpp"
#include "http/server_context.hpp"
#include "jupyter/jupyter_api.hpp"
#include "kernels/kernel.hpp"
#include "messaging/ws_codec.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <deque>

namespace cellgate::jupyter {

using http::closable;
using http::connection_limiter;
using http::request;
using http::server_context;

namespace beast = boost::beast;
namespace websocket = beast::websocket;

// What a queued kernel message costs beyond its bytes: its share of the
// message object, its queue entry.
inline constexpr std::size_t queued_message_overhead_bytes = 512;

inline std::size_t queued_cost(const messaging::kernel_message& m) noexcept {
    return m.wire_bytes() + queued_message_overhead_bytes;
}

template <class Stream>
class websocket_session : public kernels::kernel_subscriber,
                         public closable,
                         public std::enable_shared_from_this<websocket_session<Stream>> {
public:
    websocket_session(Stream&& stream, server_context& ctx, connection_limiter::slot slot, kernels::kernel_ptr k,
                      std::string session_id, bool v1)
        : ws_(std::move(stream)),
          ctx_(ctx),
          slot_(std::move(slot)),
          kernel_(std::move(k)),
          session_id_(std::move(session_id)),
          v1_(v1) {}

    ~websocket_session() override = default;

    void run(request req) {
        ws_.set_option(websocket::stream_base::timeout{std::chrono::seconds(30), ctx_.options.ws_idle_timeout, true});
        ws_.read_message_max(ctx_.options.max_ws_message_bytes);
        ws_.auto_fragment(false);
        const bool v1 = v1_;
        ws_.set_option(websocket::stream_base::decorator([v1](websocket::response_type& res) {
            res.set(beast::http::field::server, "cellgate");
            if (v1) res.set(beast::http::field::sec_websocket_protocol, messaging::v1_subprotocol);
        }));
        ws_.async_accept(req, beast::bind_front_handler(&websocket_session::on_accept, this->shared_from_this()));
    }

    void deliver(messaging::kernel_message_ptr m) override {
        // Counted from here, not from the strand: a strand that falls behind
        // must not hide a backlog of posted messages from the limit.
        inbound_bytes_ += queued_cost(*m);
        boost::asio::post(ws_.get_executor(), [self = this->shared_from_this(), m = std::move(m)]() mutable {
            self->inbound_bytes_ -= queued_cost(*m);
            self->enqueue_message(std::move(m));
        });
    }

    void kernel_closed(const std::string& reason) override {
        boost::asio::post(ws_.get_executor(), [self = this->shared_from_this(), reason] {
            self->detached_ = true;  // the kernel dropped us already
            self->kernel_gone_ = true;
            self->close(websocket::close_code::going_away, reason);
        });
    }

    void shutdown(const std::string& reason) override {
        boost::asio::post(ws_.get_executor(), [self = this->shared_from_this(), reason] {
            self->close(websocket::close_code::going_away, reason);
        });
    }

private:
    struct outgoing {
        messaging::kernel_message_ptr msg;  // encoded when written
        std::string raw;               // or a ready frame (gateway errors)
        bool binary = false;
    };

    void on_accept(beast::error_code ec) {
        if (ec) {
            spdlog::debug("kernel {}: WebSocket handshake failed: {}", kernel_->id(), ec.message());
            return;
        }
        ++ctx_.metrics.ws_connections;
        counted_ = true;
        ctx_.track(this->shared_from_this());
        const auto r = kernel_->attach(session_id_, this->shared_from_this());
        set_id_ = r.set_id;
        if (set_id_ == 0) {
            spdlog::warn("kernel {}: refused a client connection: {} client sessions are attached", kernel_->id(),
                         kernel_->connections());
            return close(websocket::close_code::try_again_later, "too many connections to this kernel");
        }
        // The replay arrives as one burst; it does not count as falling behind.
        replay_credit_ = r.replayed_bytes + r.replayed * queued_message_overhead_bytes;
        spdlog::info("kernel {}: client connected ({} protocol, session {}, {} buffered messages replayed)",
                     kernel_->id(), v1_ ? "v1" : "json", session_id_.empty() ? "-" : session_id_, r.replayed);
        do_read();
    }

    void do_read() {
        ws_.async_read(read_buffer_, beast::bind_front_handler(&websocket_session::on_read, this->shared_from_this()));
    }

    void on_read(beast::error_code ec, std::size_t) {
        if (ec) {
            if (ec == websocket::error::message_too_big)
                spdlog::warn("kernel {}: closed a client connection: message larger than {} bytes (1009)",
                             kernel_->id(), ctx_.options.max_ws_message_bytes);
            finish();
            return;
        }
        const auto data = read_buffer_.cdata();
        const std::string_view frame(static_cast<const char*>(data.data()), data.size());
        messaging::codec_limits limits;
        limits.max_frame_bytes = ctx_.options.max_ws_message_bytes;
        messaging::decode_result d;
        if (v1_) {
            d = ws_.got_binary() ? messaging::decode_v1(frame, limits)
                                 : messaging::decode_result{false, "the v1 protocol takes binary frames only", {}};
        } else {
            d = ws_.got_binary() ? messaging::decode_json_binary(frame, limits) : messaging::decode_json_text(frame, limits);
        }
        read_buffer_.consume(read_buffer_.size());
        if (!d.ok) {
            send_error("bad_message", d.error);
        } else if (!kernel_->client_send(set_id_, std::move(d.msg))) {
            send_error("kernel_not_ready", "The kernel is not ready and its queue of waiting messages is full");
        }
        if (!closing_) do_read();
    }

    // A gateway-level error, in the connection's own framing, on channel
    // "gateway": the message is dropped and the connection stays open.
    void send_error(const std::string& reason, const std::string& message) {
        spdlog::info("kernel {}: refused a client message: {}", kernel_->id(), message);
        auto msg = protocol::make_message("gateway_error", {{"reason", reason}, {"message", message}},
                                          "cellgate-gateway");
        const auto header = nlohmann::json::parse(msg.header);
        const std::string msg_id = header.at("msg_id").get<std::string>();
        outgoing o;
        if (v1_) {
            // encode_v1 takes a channel enum; the gateway channel is spliced by hand.
            const std::string channel = "gateway";
            const std::string_view parts[] = {channel, msg.header, msg.parent_header, msg.metadata, msg.content};
            const std::uint64_t n = 6;
            std::string frame(8 * (1 + n), '\0');
            std::uint64_t offset = 8 * (1 + n);
            auto put = [&frame](std::size_t at, std::uint64_t v) {
                for (int b = 0; b < 8; ++b) frame[at + static_cast<std::size_t>(b)] = static_cast<char>((v >> (8 * b)) & 0xff);
            };
            put(0, n);
            for (std::size_t i = 0; i < 5; ++i) {
                put(8 * (i + 1), offset);
                offset += parts[i].size();
            }
            put(8 * 6, offset);
            for (auto p : parts) frame.append(p);
            o.raw = std::move(frame);
            o.binary = true;
        } else {
            o.raw = R"({"channel":"gateway","header":)" + msg.header + R"(,"parent_header":{},"metadata":{},"content":)" +
                    msg.content + R"(,"msg_id":")" + msg_id + R"(","msg_type":"gateway_error","buffers":[]})";
        }
        enqueue(std::move(o));
    }

    void enqueue_message(messaging::kernel_message_ptr m) {
        if (detached_ && !kernel_gone_) {
            // Posted before we let go of the session: it belongs to the
            // session's buffer (or its next connection), not to the floor.
            kernel_->requeue(set_id_, std::move(m));
            return;
        }
        if (closing_) return;
        queued_bytes_ += queued_cost(*m);
        enqueue(outgoing{std::move(m), {}, false});
        if (queued_bytes_ + inbound_bytes_ > ctx_.options.max_ws_queue_bytes + replay_credit_) cut_off_slow_client();
    }

    void enqueue(outgoing o) {
        if (closing_) return;
        queue_.push_back(std::move(o));
        if (!writing_) do_write();
    }

    void do_write() {
        if (queue_.empty() || closing_) {
            writing_ = false;
            return;
        }
        writing_ = true;
        auto& o = queue_.front();
        // The backlog the limit applies to is what waits behind the frame in
        // flight: one large output is not a slow client.
        if (o.msg) {
            queued_bytes_ -= queued_cost(*o.msg);
            replay_credit_ -= std::min(replay_credit_, queued_cost(*o.msg));
        }
        if (o.msg) {
            if (v1_) {
                write_buffer_ = messaging::encode_v1(o.msg->view());
                ws_.binary(true);
            } else {
                auto e = messaging::encode_json(o.msg->view());
                write_buffer_ = std::move(e.bytes);
                ws_.binary(e.binary);
            }
        } else {
            write_buffer_ = std::move(o.raw);
            ws_.binary(o.binary);
        }
        ws_.async_write(boost::asio::buffer(write_buffer_),
                        beast::bind_front_handler(&websocket_session::on_write, this->shared_from_this()));
    }

    void on_write(beast::error_code ec, std::size_t) {
        write_buffer_.clear();
        write_buffer_.shrink_to_fit();
        if (ec) {
            finish();  // the frame that failed and the rest go back to the session's buffer
            writing_ = false;
            return;
        }
        if (!queue_.empty()) queue_.pop_front();
        do_write();
    }

    void cut_off_slow_client() {
        ++ctx_.metrics.ws_slow_client_closes;
        spdlog::warn("kernel {}: client session {} fell {} bytes behind; closing it with 1013, its messages are "
                     "kept for a reconnect",
                     kernel_->id(), session_id_.empty() ? "-" : session_id_, queued_bytes_);
        release_session(false);
        close(websocket::close_code::try_again_later, "client too slow: reconnect with the same session_id");
    }

    // Lets go of the kernel session, handing every message not yet written
    // back to its buffer. The frame in flight stays ours when it will still be
    // written (a close waits for it); after a failed write it goes back too.
    void release_session(bool include_in_flight) {
        if (detached_ || set_id_ == 0) return;
        std::vector<messaging::kernel_message_ptr> unsent;
        const std::size_t first = writing_ && !include_in_flight ? 1 : 0;
        for (std::size_t i = first; i < queue_.size(); ++i)
            if (queue_[i].msg) unsent.push_back(queue_[i].msg);
        queue_.erase(queue_.begin() + static_cast<long>(std::min(first, queue_.size())), queue_.end());
        queued_bytes_ = 0;
        detached_ = true;
        kernel_->detach(set_id_, this, std::move(unsent));
    }

    void close(websocket::close_code code, const std::string& reason) {
        if (closing_) return;
        closing_ = true;
        ws_.async_close(websocket::close_reason(code, reason.substr(0, 120)),
                        [self = this->shared_from_this()](beast::error_code) { self->finish(); });
    }

    void finish() {
        if (finished_) return;
        finished_ = true;
        closing_ = true;
        release_session(true);
        if (counted_) --ctx_.metrics.ws_connections;
        ctx_.untrack(this->shared_from_this());
        spdlog::info("kernel {}: client disconnected (session {})", kernel_->id(), session_id_.empty() ? "-" : session_id_);
    }

    websocket::stream<Stream> ws_;
    server_context& ctx_;
    connection_limiter::slot slot_;
    kernels::kernel_ptr kernel_;
    std::string session_id_;
    bool v1_;
    std::uint64_t set_id_ = 0;
    beast::flat_buffer read_buffer_;
    std::deque<outgoing> queue_;
    std::size_t queued_bytes_ = 0;   // waiting behind the frame in flight (queued_cost)
    std::atomic<std::size_t> inbound_bytes_{0};  // posted by deliver(), not yet on the strand
    std::size_t replay_credit_ = 0;  // replayed bytes not yet written
    std::string write_buffer_;
    bool writing_ = false, closing_ = false, finished_ = false, detached_ = false, counted_ = false;
    bool kernel_gone_ = false;
};

// What admit() accepted, for the socket: the kernel, the client's session
// id, and whether it speaks the v1 framing.
struct channel_accept {
    kernels::kernel_ptr kernel;
    std::string session_id;
    bool v1 = false;
};

// The socket, once accepted (kernel_channels_plain.cpp, kernel_channels_tls.cpp).
template <class Stream>
void start_kernel_channels(Stream&& stream, server_context& ctx, connection_limiter::slot slot,
                           std::shared_ptr<void> accepted, request req) {
    auto a = std::static_pointer_cast<channel_accept>(std::move(accepted));
    std::make_shared<websocket_session<Stream>>(std::move(stream), ctx, std::move(slot), std::move(a->kernel),
                                                std::move(a->session_id), a->v1)
        ->run(std::move(req));
}

// Explicitly instantiated for each stream in a unit of its own; declared
// here for kernel_channels.cpp.
extern template void start_kernel_channels<http::plain_stream>(http::plain_stream&&, server_context&,
                                                              connection_limiter::slot, std::shared_ptr<void>, request);
extern template void start_kernel_channels<http::tls_stream>(http::tls_stream&&, server_context&,
                                                            connection_limiter::slot, std::shared_ptr<void>, request);

}  // namespace cellgate::jupyter
