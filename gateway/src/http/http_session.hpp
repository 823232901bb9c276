#pragma once

// One client connection speaking HTTP/1.1 (plain TCP or TLS): read the
// headers, admit them (dispatch.hpp), then read the body, stream an upload
// into its file, hand the socket to a WebSocket session, or answer at once.
// Everything runs on the connection's strand; every completion holds
// shared_from_this().

#include "http/dispatch.hpp"
#include "http/handoffs.hpp"
#include "http/server_context.hpp"
#include "http/sse_stream.hpp"
#include "util/api_error.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <limits>
#include <optional>

namespace cellgate::http {

template <class Stream>
class http_session : public std::enable_shared_from_this<http_session<Stream>> {
    using clock = std::chrono::steady_clock;
    static constexpr bool is_tls = std::is_same_v<Stream, boost::beast::ssl_stream<boost::beast::tcp_stream>>;

public:
    http_session(Stream&& stream, server_context& ctx, connection_limiter::slot slot, std::string remote)
        : stream_(std::move(stream)), ctx_(ctx), slot_(std::move(slot)), remote_(std::move(remote)) {}

    void run() {
        if constexpr (is_tls) {
            boost::beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(30));
            stream_.async_handshake(boost::asio::ssl::stream_base::server,
                                    boost::beast::bind_front_handler(&http_session::on_handshake, this->shared_from_this()));
        } else {
            boost::asio::dispatch(stream_.get_executor(),
                                  boost::beast::bind_front_handler(&http_session::do_read, this->shared_from_this()));
        }
    }

private:
    void on_handshake(boost::beast::error_code ec) {
        if (ec) return;
        do_read();
    }

    void do_read() {
        header_parser_.emplace();
        header_parser_->header_limit(static_cast<std::uint32_t>(ctx_.options.max_header_bytes));
        header_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
        boost::beast::get_lowest_layer(stream_).expires_after(ctx_.options.header_timeout);
        bhttp::async_read_header(stream_, buffer_, *header_parser_,
                                 boost::beast::bind_front_handler(&http_session::on_header, this->shared_from_this()));
    }

    void on_header(boost::beast::error_code ec, std::size_t) {
        if (ec == bhttp::error::end_of_stream) return do_close();
        if (ec == bhttp::error::header_limit) return send(error_response(431, "Request headers too large"), false, {});
        if (ec) return;  // timeout, reset, malformed: nothing to answer
        started_ = clock::now();
        admission_ = admit({ctx_.routes, ctx_.auth, ctx_.options, ctx_.hops.locate ? &ctx_.hops : nullptr, &ctx_.auth_failures},
                           header_parser_->get(), remote_);
        auto& a = admission_;
        switch (a.what) {
            case admission::action::respond:
                return send(std::move(a.reply), a.ctx->req.keep_alive() && !a.close_after, a.ctx);
            case admission::action::upgrade:
                return upgrade(a.ctx);
            case admission::action::socket:
                return open_socket(*a.socket, a.ctx);
            case admission::action::upload:
                return start_upload(*a.upload, a.ctx);
            case admission::action::forward:
                return forward(a);
            case admission::action::read_body:
                break;
        }
        parser_.emplace(std::move(*header_parser_));
        parser_->body_limit(a.body_limit);
        boost::beast::get_lowest_layer(stream_).expires_after(ctx_.options.request_timeout);
        continue_then([self = this->shared_from_this()] {
            bhttp::async_read(self->stream_, self->buffer_, *self->parser_,
                              boost::beast::bind_front_handler(&http_session::on_read, self));
        });
    }

    // Answers "Expect: 100-continue" (curl sends it for large bodies) before
    // reading the body, and only for an admitted request.
    void continue_then(std::function<void()> next) {
        const auto& req = admission_.ctx->req;
        if (!boost::beast::iequals(req[bhttp::field::expect], "100-continue")) return next();
        auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, req.version());
        bhttp::async_write(stream_, *cont, [cont, next = std::move(next)](boost::beast::error_code e, std::size_t) {
            if (!e) next();
        });
    }

    void on_read(boost::beast::error_code ec, std::size_t) {
        if (ec == bhttp::error::end_of_stream) return do_close();
        if (ec == bhttp::error::body_limit) return send(body_too_large(admission_.body_limit), false, admission_.ctx);
        if (ec) return;
        auto ctx = admission_.ctx;
        ctx->req.body() = std::move(parser_->get().body());
        parser_.reset();
        const bool keep_alive = ctx->req.keep_alive();
        auto self = this->shared_from_this();
        dispatch(admission_, [self, ctx, keep_alive](response r) {
            boost::asio::post(self->stream_.get_executor(), [self, ctx, keep_alive, r = std::move(r)]() mutable {
                self->send(std::move(r), keep_alive, ctx);
            });
        });
    }

    void start_upload(const upload_handler& up, const request_ptr& ctx) {
        const auto declared = header_parser_->content_length();
        upload_target t;
        try {
            t = up.prepare(ctx);
            if (declared && *declared > t.max_bytes) {
                ::close(t.fd);
                if (t.discard) t.discard();
                return send(error_response(413, "The upload is larger than " + std::to_string(t.max_bytes) + " bytes"),
                            false, ctx);
            }
        } catch (const api_exception& e) {
            return send(error_response(e.status(), e.what()), false, ctx);
        } catch (const std::exception& e) {
            spdlog::error("upload {}: {}", ctx->route, e.what());
            return send(error_response(500, "Internal error"), false, ctx);
        }
        upload_parser_.emplace(std::move(*header_parser_));
        upload_parser_->body_limit(t.max_bytes);
        boost::beast::error_code ec;
        boost::beast::file f;
        f.native_handle(t.fd);
        upload_parser_->get().body().reset(std::move(f), ec);
        boost::beast::get_lowest_layer(stream_).expires_after(std::chrono::minutes(30));
        auto self = this->shared_from_this();
        auto after = [self, ctx, &up, discard = t.discard, max = t.max_bytes](boost::beast::error_code e, std::size_t) {
            self->on_upload(e, ctx, up, discard, max);
        };
        continue_then([self, after] { bhttp::async_read(self->stream_, self->buffer_, *self->upload_parser_, after); });
    }

    void on_upload(boost::beast::error_code e, const request_ptr& ctx, const upload_handler& up,
                   const std::function<void()>& discard, std::uint64_t max) {
        upload_parser_->get().body().close();
        if (e) {
            if (discard) discard();
            if (e == bhttp::error::body_limit)
                return send(error_response(413, "The upload is larger than " + std::to_string(max) + " bytes"), false, ctx);
            if (e == boost::beast::errc::no_space_on_device || e == boost::beast::errc::file_too_large)
                return send(error_response(507, "The workspace is full"), false, ctx);
            if (e == bhttp::error::end_of_stream || e == boost::beast::error::timeout) return;  // the client went away
            spdlog::warn("upload {}: {}", ctx->path.substr(0, 200), e.message());
            return send(error_response(400, "The upload failed: " + e.message()), false, ctx);
        }
        const auto bytes = upload_parser_->content_length().value_or(0);
        const bool keep_alive = ctx->req.keep_alive();
        auto self = this->shared_from_this();
        reply_fn reply = [self, ctx, keep_alive](response r) {
            boost::asio::post(self->stream_.get_executor(), [self, ctx, keep_alive, r = std::move(r)]() mutable {
                self->send(std::move(r), keep_alive, ctx);
            });
        };
        try {
            up.finish(ctx, bytes, std::move(reply));
        } catch (const api_exception& ex) {
            send(error_response(ex.status(), ex.what()), keep_alive, ctx);
        }
    }

    void upgrade(const request_ptr& ctx) {
        if (!origin_allowed(ctx->req, ctx_.options.allow_origins))
            return send(error_response(403, "Origin not allowed"), false, ctx);
        if (ctx_.channels == nullptr) return send(error_response(404, "No such kernel"), false, ctx);
        if (!hold_tenant_socket(ctx)) return;
        std::shared_ptr<void> accepted;
        if (auto refusal = ctx_.channels->admit(ctx, accepted)) return send(std::move(*refusal), false, ctx);
        ctx_.metrics.observe_request("GET", ctx->route, 101, std::chrono::duration<double>(clock::now() - started_).count());
        boost::beast::get_lowest_layer(stream_).expires_never();
        if constexpr (std::is_same_v<Stream, plain_stream>)
            ctx_.channels->plain(std::move(stream_), ctx_, std::move(slot_), std::move(accepted), std::move(ctx->req));
        else
            ctx_.channels->tls(std::move(stream_), ctx_, std::move(slot_), std::move(accepted), std::move(ctx->req));
    }

    // The connection goes to the id's owner, with what was read past the head.
    void forward(const admission& a) {
        ++ctx_.metrics.cluster_hops;
        if (spdlog::should_log(spdlog::level::debug))
            spdlog::debug("{} {} → node {} at {}", std::string(bhttp::to_string(a.ctx->req.method())),
                          a.ctx->path.substr(0, 200), a.forward_tag, a.forward_to);
        const auto& head = header_parser_->get();
        auto relayed = hop_request_head(head.base(), remote_, *ctx_.hops.peers, a.forward_tag,
                                        a.forward_who ? &*a.forward_who : nullptr);
        const auto pending = buffer_.data();
        std::string already(static_cast<const char*>(pending.data()), pending.size());
        boost::beast::get_lowest_layer(stream_).expires_never();
        start_hop_session(std::move(stream_), std::move(slot_), std::move(relayed), std::move(already), a.forward_to,
                          a.forward_tag, head.version());
    }

    // A WebSocket counts against its tenant's cap for as long as the
    // connection lives; at the cap, 429 (security review turn 3, M3).
    bool hold_tenant_socket(const request_ptr& ctx) {
        auto t = ctx_.tenant_sockets.acquire(ctx->who.tenant);
        if (!t) {
            ++ctx_.metrics.ws_tenant_refusals;
            send(error_response(429, "Your tenant has " + std::to_string(ctx_.options.max_websockets_per_tenant) +
                                         " WebSockets open, the most it may; close one first"),
                 false, ctx);
            return false;
        }
        slot_ = connection_limiter::both(std::move(slot_), std::move(t));
        return true;
    }

    void open_socket(const socket_handler& handler, const request_ptr& ctx) {
        if (!origin_allowed(ctx->req, ctx_.options.allow_origins))
            return send(error_response(403, "Origin not allowed"), false, ctx);
        socket_accept accepted;
        try {
            accepted = handler(ctx);
        } catch (const api_exception& e) {
            return send(error_response(e.status(), e.what()), false, ctx);
        }
        if (accepted.refusal) return send(std::move(*accepted.refusal), false, ctx);
        if (!hold_tenant_socket(ctx)) return;
        ctx_.metrics.observe_request("GET", ctx->route, 101, std::chrono::duration<double>(clock::now() - started_).count());
        boost::beast::get_lowest_layer(stream_).expires_never();
        start_message_socket(std::move(stream_), ctx_, std::move(slot_), ctx->route, std::move(accepted.open),
                             std::move(ctx->req));
    }

    template <class Body>
    void finish_headers(bhttp::response<Body>& res, const response& r, const request_ptr& ctx) {
        if (set_response_headers(res.base(), r, ctx ? &ctx->req : nullptr, ctx_.options.allow_origins) != 0)
            spdlog::warn("{}: a response header holding CR, LF or NUL was dropped", ctx ? ctx->route : "(no route)");
    }

    void send(response r, bool keep_alive, const request_ptr& ctx) {
        if (ctx)
            ctx_.metrics.observe_request(std::string(bhttp::to_string(ctx->req.method())), ctx->route, r.status,
                                         std::chrono::duration<double>(clock::now() - started_).count());
        if (ctx && r.status >= 400)
            spdlog::info("{} {} → {}", std::string(bhttp::to_string(ctx->req.method())), ctx->path.substr(0, 200), r.status);
        const unsigned version = ctx ? ctx->req.version() : 11;
        if (r.stream) return start_stream(std::move(r), version, ctx);
        if (r.file_fd >= 0) {
            auto res = std::make_shared<bhttp::response<bhttp::file_body>>(static_cast<bhttp::status>(r.status), version);
            finish_headers(*res, r, ctx);
            boost::beast::error_code ec;
            boost::beast::file f;
            f.native_handle(r.file_fd);
            res->body().reset(std::move(f), ec);
            res->content_length(r.file_size);
            res->keep_alive(keep_alive);
            write(res, keep_alive);
        } else {
            auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(r.status), version);
            finish_headers(*res, r, ctx);
            res->body() = std::move(r.body);
            res->prepare_payload();
            res->keep_alive(keep_alive);
            write(res, keep_alive);
        }
    }

    // Headers with chunked encoding, then the body from an sse_stream.
    void start_stream(response r, unsigned version, const request_ptr& ctx) {
        auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(r.status), version);
        finish_headers(*res, r, ctx);
        res->chunked(true);
        res->keep_alive(false);
        auto serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
        boost::beast::get_lowest_layer(stream_).expires_never();
        auto self = this->shared_from_this();
        bhttp::async_write_header(stream_, *serializer, [self, res, serializer, start = std::move(r.stream)](
                                                            boost::beast::error_code ec, std::size_t) {
            auto sink = std::make_shared<sse_stream<Stream>>(self->stream_, self, self->ctx_.options.max_sse_queue_bytes,
                                                             [self] { self->do_close(); },
                                                             self->ctx_.metrics.sse_slow_client_closes);
            if (ec) {
                sink->close();
                start(sink);
                return;
            }
            sink->watch();
            start(sink);
        });
    }

    template <class Message>
    void write(const std::shared_ptr<Message>& res, bool keep_alive) {
        boost::beast::get_lowest_layer(stream_).expires_after(std::chrono::minutes(10));
        bhttp::async_write(stream_, *res,
                           [self = this->shared_from_this(), res, keep_alive](boost::beast::error_code ec, std::size_t) {
                               if (ec) return;
                               if (!keep_alive) return self->do_close();
                               self->do_read();
                           });
    }

    void do_close() {
        boost::beast::error_code ec;
        if constexpr (is_tls) {
            boost::beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
            stream_.async_shutdown([self = this->shared_from_this()](boost::beast::error_code) {});
        } else {
            stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ec);
        }
    }

    Stream stream_;
    server_context& ctx_;
    connection_limiter::slot slot_;
    std::string remote_;
    boost::beast::flat_buffer buffer_;
    admission admission_;
    std::optional<bhttp::request_parser<bhttp::empty_body>> header_parser_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    std::optional<bhttp::request_parser<bhttp::file_body>> upload_parser_;
    clock::time_point started_;
};

}  // namespace cellgate::http
