#include "http/server.hpp"

#include "util/api_error.hpp"
#include "ws/channels_session.hpp"

#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <array>
#include <deque>
#include <limits>
#include <variant>

namespace cellgate::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

void server_context::track(const std::shared_ptr<closable>& c) {
    std::lock_guard lock(live_mutex);
    live.insert(c);
}

void server_context::untrack(const std::shared_ptr<closable>& c) {
    std::lock_guard lock(live_mutex);
    live.erase(c);
}

namespace {

constexpr const char* channels_pattern = "/api/kernels/{kernel_id}/channels";

using clock = std::chrono::steady_clock;

bool public_route(const std::string& pattern) {
    return pattern == "/api" || pattern == "/healthz" || pattern == "/" || pattern.rfind("/static/", 0) == 0 ||
           pattern == "/static-config.json";
}

template <class Stream>
class http_session : public std::enable_shared_from_this<http_session<Stream>> {
public:
    http_session(Stream&& stream, server_context& ctx) : stream_(std::move(stream)), ctx_(ctx) {}

    void run() {
        if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
            beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(30));
            stream_.async_handshake(asio::ssl::stream_base::server,
                                    beast::bind_front_handler(&http_session::on_handshake, this->shared_from_this()));
        } else {
            asio::dispatch(stream_.get_executor(),
                           beast::bind_front_handler(&http_session::do_read, this->shared_from_this()));
        }
    }

private:
    void on_handshake(beast::error_code ec) {
        if (ec) return;
        do_read();
    }

    void do_read() {
        header_parser_.emplace();
        header_parser_->header_limit(static_cast<std::uint32_t>(ctx_.options.max_header_bytes));
        header_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
        beast::get_lowest_layer(stream_).expires_after(ctx_.options.request_timeout);
        bhttp::async_read_header(stream_, buffer_, *header_parser_,
                                 beast::bind_front_handler(&http_session::on_header, this->shared_from_this()));
    }

    // Headers first: an upload route streams its body into a file; anything
    // else reads the body into memory, up to max_body_bytes.
    void on_header(beast::error_code ec, std::size_t) {
        if (ec == bhttp::error::end_of_stream) return do_close();
        if (ec == bhttp::error::header_limit) return send(error_response(431, "Request headers too large"), false, {});
        if (ec) return;  // timeout, reset, malformed: nothing to answer
        const auto& h = header_parser_->get();
        const auto target = std::string_view(h.target().data(), h.target().size());
        const auto m = ctx_.routes.find(h.method(), target.substr(0, target.find('?')));
        if (m.upload != nullptr && !websocket::is_upgrade(h)) return start_upload(*m.upload, m);
        // A declared length is checked here: the limit set on the body parser
        // below applies only to bodies whose length was not known up front.
        if (header_parser_->content_length() && *header_parser_->content_length() > ctx_.options.max_body_bytes)
            return send(error_response(413, "The request body is larger than " +
                                                std::to_string(ctx_.options.max_body_bytes) + " bytes"),
                        false, {});
        const bool expect = expects_continue(h);
        const unsigned version = h.version();
        parser_.emplace(std::move(*header_parser_));
        parser_->body_limit(ctx_.options.max_body_bytes);
        continue_then(expect, version, [self = this->shared_from_this()] {
            bhttp::async_read(self->stream_, self->buffer_, *self->parser_,
                              beast::bind_front_handler(&http_session::on_read, self));
        });
    }

    // Answers "Expect: 100-continue" (curl sends it for large bodies) before
    // reading the body.
    static bool expects_continue(const bhttp::request_header<>& h) {
        return beast::iequals(h[bhttp::field::expect], "100-continue");
    }

    void continue_then(bool expect, unsigned version, std::function<void()> next) {
        if (!expect) return next();
        auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version);
        bhttp::async_write(stream_, *cont, [cont, next = std::move(next)](beast::error_code e, std::size_t) {
            if (!e) next();
        });
    }

    void on_read(beast::error_code ec, std::size_t) {
        if (ec == bhttp::error::end_of_stream) return do_close();
        if (ec == bhttp::error::body_limit) {
            return send(error_response(413, "The request body is larger than " +
                                                std::to_string(ctx_.options.max_body_bytes) + " bytes"),
                        false, {});
        }
        if (ec) return;
        handle(parser_->release());
    }

    void start_upload(const upload_handler& up, const router::match& m) {
        started_ = clock::now();
        auto ctx = std::make_shared<request_context>();
        ctx->req = request(header_parser_->get().base());
        const auto target = std::string_view(ctx->req.target().data(), ctx->req.target().size());
        const auto q = target.find('?');
        if (q != std::string_view::npos) ctx->query = parse_query(target.substr(q + 1));
        ctx->path = std::string(target.substr(0, q));
        ctx->route = m.pattern;
        ctx->params = m.params;
        ctx->remote = remote_;
        const auto a = ctx_.auth.check(ctx->req, ctx->query);
        if (a.status == authenticator::outcome::missing)
            return send(error_response(401, "Authentication required: send 'Authorization: token <token>'"), false, ctx);
        if (a.status == authenticator::outcome::wrong) return send(error_response(403, "Invalid token"), false, ctx);
        ctx->who = a.who;
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
        const bool expect = expects_continue(header_parser_->get());
        const unsigned version = header_parser_->get().version();
        upload_parser_.emplace(std::move(*header_parser_));
        upload_parser_->body_limit(t.max_bytes);
        beast::error_code ec;
        beast::file f;
        f.native_handle(t.fd);
        upload_parser_->get().body().reset(std::move(f), ec);
        const bool keep_alive = ctx->req.keep_alive();
        beast::get_lowest_layer(stream_).expires_after(std::chrono::minutes(30));
        auto self = this->shared_from_this();
        auto after = [self, ctx, keep_alive, &up, discard = t.discard, max = t.max_bytes](beast::error_code e, std::size_t) {
            self->upload_parser_->get().body().close();
            if (e) {
                if (discard) discard();
                if (e == bhttp::error::body_limit)
                    return self->send(error_response(413, "The upload is larger than " + std::to_string(max) + " bytes"), false, ctx);
                if (e == beast::errc::no_space_on_device || e == beast::errc::file_too_large)
                    return self->send(error_response(507, "The workspace is full"), false, ctx);
                if (e == bhttp::error::end_of_stream || e == beast::error::timeout) return;  // the client went away
                spdlog::warn("upload {}: {}", ctx->path.substr(0, 200), e.message());
                return self->send(error_response(400, "The upload failed: " + e.message()), false, ctx);
            }
            const auto bytes = self->upload_parser_->content_length().value_or(0);
            reply_fn reply = [self, ctx, keep_alive](response r) {
                asio::post(self->stream_.get_executor(), [self, ctx, keep_alive, r = std::move(r)]() mutable {
                    self->send(std::move(r), keep_alive, ctx);
                });
            };
            try {
                up.finish(ctx, bytes, std::move(reply));
            } catch (const api_exception& ex) {
                self->send(error_response(ex.status(), ex.what()), keep_alive, ctx);
            }
        };
        continue_then(expect, version, [self, after] {
            bhttp::async_read(self->stream_, self->buffer_, *self->upload_parser_, after);
        });
    }

    void handle(request req) {
        started_ = clock::now();
        auto ctx = std::make_shared<request_context>();
        const auto target = std::string_view(req.target().data(), req.target().size());
        const auto q = target.find('?');
        const auto raw_path = target.substr(0, q);
        if (q != std::string_view::npos) ctx->query = parse_query(target.substr(q + 1));
        ctx->remote = remote_;
        const bool keep_alive = req.keep_alive();

        if (req.method() == bhttp::verb::options) {
            response r = empty_response(204);
            ctx->req = std::move(req);
            return send(std::move(r), keep_alive, ctx);
        }
        const auto m = ctx_.routes.find(req.method(), raw_path);
        ctx->route = m.pattern.empty() ? "(unmatched)" : m.pattern;
        ctx->req = std::move(req);
        if (m.handler == nullptr) {
            if (m.status == 400) return send(error_response(400, "The request path has a malformed %-escape"), keep_alive, ctx);
            if (m.status == 405) {
                auto r = error_response(405, "Method not allowed here");
                r.headers.emplace_back("Allow", m.allow);
                return send(std::move(r), keep_alive, ctx);
            }
            return send(error_response(404, "Not found: " + std::string(raw_path.substr(0, 200))), keep_alive, ctx);
        }
        ctx->params = m.params;
        ctx->path = std::string(raw_path);

        if (!public_route(m.pattern)) {
            const auto a = ctx_.auth.check(ctx->req, ctx->query);
            if (a.status == authenticator::outcome::missing)
                return send(error_response(401, "Authentication required: send 'Authorization: token <token>'"),
                            keep_alive, ctx);
            if (a.status == authenticator::outcome::wrong)
                return send(error_response(403, "Invalid token"), keep_alive, ctx);
            ctx->who = a.who;
        }

        if (websocket::is_upgrade(ctx->req)) {
            if (m.pattern != channels_pattern)
                return send(error_response(400, "No WebSocket endpoint here"), keep_alive, ctx);
            return upgrade(ctx);
        }

        auto self = this->shared_from_this();
        reply_fn reply = [self, ctx, keep_alive](response r) {
            asio::post(self->stream_.get_executor(), [self, ctx, keep_alive, r = std::move(r)]() mutable {
                self->send(std::move(r), keep_alive, ctx);
            });
        };
        try {
            (*m.handler)(ctx, std::move(reply));
        } catch (const api_exception& e) {
            send(error_response(e.status(), e.what()), keep_alive, ctx);
        } catch (const nlohmann::json::exception& e) {
            // Reading a request body's field as the wrong type.
            spdlog::info("{} {}: {}", std::string(bhttp::to_string(ctx->req.method())), ctx->route, e.what());
            send(error_response(400, "A field in the request body has the wrong type"), keep_alive, ctx);
        } catch (const std::exception& e) {
            spdlog::error("{} {}: handler failed: {}", std::string(bhttp::to_string(ctx->req.method())), ctx->route, e.what());
            send(error_response(500, "Internal error"), keep_alive, ctx);
        }
    }

    void upgrade(const request_ptr& ctx) {
        const bool keep_alive = false;
        if (!origin_allowed(ctx->req, ctx_.options.allow_origins))
            return send(error_response(403, "Origin not allowed"), keep_alive, ctx);
        auto k = ctx_.kernels.find(ctx->who.tenant, ctx->param("kernel_id"));
        if (!k) return send(error_response(404, "No such kernel"), keep_alive, ctx);
        const auto offered = ctx->req[bhttp::field::sec_websocket_protocol];
        const bool v1 = header_list_contains(std::string_view(offered.data(), offered.size()), ws::v1_subprotocol);
        const auto session_id = ctx->query_value("session_id").value_or("");
        ctx_.metrics.observe_request("GET", ctx->route, 101, std::chrono::duration<double>(clock::now() - started_).count());
        beast::get_lowest_layer(stream_).expires_never();
        std::make_shared<ws::channels_session<Stream>>(std::move(stream_), ctx_, std::move(k), session_id, v1)
            ->run(std::move(ctx->req));
    }

    template <class Body>
    void finish_headers(bhttp::response<Body>& res, const response& r, const request_ptr& ctx) {
        if (set_response_headers(res.base(), r, ctx ? &ctx->req : nullptr, ctx_.options.allow_origins) != 0)
            spdlog::warn("{}: a response header holding CR, LF or NUL was dropped", ctx ? ctx->route : "(no route)");
    }

    void send(response r, bool keep_alive, request_ptr ctx) {
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
            beast::error_code ec;
            beast::file f;
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

    // Server-Sent Events and other streamed bodies: headers with chunked
    // encoding, then chunks in order from a queue only the strand touches; a
    // one-byte read watches for the client going away.
    class chunk_sink : public stream_sink, public std::enable_shared_from_this<chunk_sink> {
    public:
        explicit chunk_sink(std::shared_ptr<http_session> s) : session_(std::move(s)) {}
        void write(std::string chunk) override {
            if (chunk.empty()) return;
            asio::post(session_->stream_.get_executor(), [self = this->shared_from_this(), c = std::move(chunk)]() mutable {
                self->queue_.push_back(std::move(c));
                self->pump();
            });
        }
        void close() override {
            asio::post(session_->stream_.get_executor(), [self = this->shared_from_this()] {
                self->closing_ = true;
                self->pump();
            });
        }
        void on_disconnect(std::function<void()> callback) override {
            asio::post(session_->stream_.get_executor(), [self = this->shared_from_this(), cb = std::move(callback)]() mutable {
                if (self->gone_) return cb();
                self->on_gone_ = std::move(cb);
            });
        }
        void watch() {
            session_->stream_.async_read_some(asio::buffer(probe_), [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                if (!ec) return self->watch();  // a client should send nothing now; ignore it
                self->gone();
            });
        }

    private:
        void gone() {
            if (gone_) return;
            gone_ = true;
            queue_.clear();
            if (on_gone_ && !finished_) std::exchange(on_gone_, nullptr)();
        }
        void pump() {
            if (writing_ || gone_) return;
            if (queue_.empty()) {
                if (closing_ && !finished_) {
                    finished_ = true;
                    writing_ = true;
                    asio::async_write(session_->stream_, bhttp::make_chunk_last(),
                                      [self = this->shared_from_this()](beast::error_code, std::size_t) {
                                          self->session_->do_close();
                                      });
                }
                return;
            }
            writing_ = true;
            current_ = std::move(queue_.front());
            queue_.pop_front();
            asio::async_write(session_->stream_, bhttp::make_chunk(asio::buffer(current_)),
                              [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                                  self->writing_ = false;
                                  if (ec) return self->gone();
                                  self->pump();
                              });
        }
        std::shared_ptr<http_session> session_;
        std::deque<std::string> queue_;
        std::string current_;
        std::array<char, 1> probe_{};
        std::function<void()> on_gone_;
        bool writing_ = false, closing_ = false, finished_ = false, gone_ = false;
    };

    void start_stream(response r, unsigned version, const request_ptr& ctx) {
        auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(r.status), version);
        finish_headers(*res, r, ctx);
        res->chunked(true);
        res->keep_alive(false);
        auto serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
        beast::get_lowest_layer(stream_).expires_never();
        bhttp::async_write_header(stream_, *serializer,
                                  [self = this->shared_from_this(), res, serializer, start = std::move(r.stream)](
                                      beast::error_code ec, std::size_t) {
                                      auto sink = std::make_shared<chunk_sink>(self);
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
        beast::get_lowest_layer(stream_).expires_after(std::chrono::minutes(10));
        bhttp::async_write(stream_, *res,
                           [self = this->shared_from_this(), res, keep_alive](beast::error_code ec, std::size_t) {
                               if (ec) return;
                               if (!keep_alive) return self->do_close();
                               self->do_read();
                           });
    }

    void do_close() {
        beast::error_code ec;
        if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
            beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
            stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {});
        } else {
            stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        }
    }

public:
    std::string remote_;

private:
    Stream stream_;
    server_context& ctx_;
    beast::flat_buffer buffer_;
    std::optional<bhttp::request_parser<bhttp::empty_body>> header_parser_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    std::optional<bhttp::request_parser<bhttp::file_body>> upload_parser_;
    clock::time_point started_;
};

}  // namespace

struct server::impl : std::enable_shared_from_this<server::impl> {
    impl(asio::io_context& i, server_context& c, std::shared_ptr<asio::ssl::context> t)
        : ioc(i), ctx(c), tls(std::move(t)), acceptor(asio::make_strand(i)) {}

    void do_accept() {
        acceptor.async_accept(asio::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
            self->on_accept(ec, std::move(s));
        });
    }

    void on_accept(beast::error_code ec, tcp::socket socket) {
        if (ec) {
            if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
            spdlog::warn("accept failed: {}", ec.message());
        } else {
            // Without TCP_NODELAY, Nagle meets delayed ACKs and every reply waits ~40 ms.
            socket.set_option(tcp::no_delay(true), ec);
            std::string remote;
            if (auto ep = socket.remote_endpoint(ec); !ec) remote = ep.address().to_string();
            if (tls) {
                auto s = std::make_shared<http_session<beast::ssl_stream<beast::tcp_stream>>>(
                    beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls), ctx);
                s->remote_ = remote;
                s->run();
            } else {
                auto s = std::make_shared<http_session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), ctx);
                s->remote_ = remote;
                s->run();
            }
        }
        if (acceptor.is_open()) do_accept();
    }

    asio::io_context& ioc;
    server_context& ctx;
    std::shared_ptr<asio::ssl::context> tls;
    tcp::acceptor acceptor;
};

server::server(asio::io_context& ioc, server_context& ctx, std::shared_ptr<asio::ssl::context> tls)
    : impl_(std::make_shared<impl>(ioc, ctx, std::move(tls))) {}

server::~server() = default;

unsigned short server::listen() {
    auto& a = impl_->acceptor;
    const tcp::endpoint ep(asio::ip::make_address(impl_->ctx.options.ip), impl_->ctx.options.port);
    a.open(ep.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    a.bind(ep);
    a.listen(asio::socket_base::max_listen_connections);
    impl_->do_accept();
    return a.local_endpoint().port();
}

void server::stop() {
    asio::post(impl_->acceptor.get_executor(), [self = impl_] {
        beast::error_code ec;
        self->acceptor.close(ec);
    });
    std::vector<std::shared_ptr<closable>> live;
    {
        std::lock_guard lock(impl_->ctx.live_mutex);
        for (const auto& w : impl_->ctx.live)
            if (auto c = w.lock()) live.push_back(std::move(c));
    }
    for (auto& c : live) c->shutdown("server shutting down");
}

}  // namespace cellgate::http
