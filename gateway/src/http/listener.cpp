#include "http/listener.hpp"

#include "http/handoffs.hpp"
#include "http/server_context.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

namespace cellgate::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

void server_context::track(const std::shared_ptr<closable>& c) {
    std::lock_guard lock(live_mutex_);
    live_.insert(c);
}

void server_context::untrack(const std::shared_ptr<closable>& c) {
    std::lock_guard lock(live_mutex_);
    live_.erase(c);
}

std::vector<std::shared_ptr<closable>> server_context::live_sockets() {
    std::vector<std::shared_ptr<closable>> out;
    std::lock_guard lock(live_mutex_);
    for (const auto& w : live_)
        if (auto c = w.lock()) out.push_back(std::move(c));
    return out;
}

namespace {

constexpr auto accept_backoff = std::chrono::milliseconds(100);
constexpr auto log_interval = std::chrono::seconds(10);

bool out_of_resources(const beast::error_code& ec) {
    return ec == asio::error::no_descriptors || ec == beast::errc::too_many_files_open_in_system ||
           ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

// The answer to a connection over the cap, written without waiting: the
// socket is new, so its send buffer takes it whole or the client gets a reset.
constexpr std::string_view over_capacity_response =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    "Retry-After: 1\r\nContent-Length: 93\r\n\r\n"
    R"({"reason":"Service Unavailable","message":"Too many connections from this address or in all"})";

}  // namespace

struct listener::impl : std::enable_shared_from_this<listener::impl> {
    impl(asio::io_context& i, server_context& c, std::shared_ptr<asio::ssl::context> t)
        : ioc(i), ctx(c), tls(std::move(t)), acceptor(asio::make_strand(i)), retry(acceptor.get_executor()) {}

    void do_accept() {
        acceptor.async_accept(asio::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
            self->on_accept(ec, std::move(s));
        });
    }

    void on_accept(beast::error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
        if (ec) return back_off(ec);
        std::string remote;
        if (auto ep = socket.remote_endpoint(ec); !ec) remote = ep.address().to_string();
        const auto& trusted = ctx.options.trusted_proxies;
        auto slot = ctx.connections.acquire(remote, std::find(trusted.begin(), trusted.end(), remote) == trusted.end());
        if (!slot) {
            refuse(std::move(socket), remote);
        } else {
            // Without TCP_NODELAY, Nagle meets delayed ACKs and every reply waits ~40 ms.
            socket.set_option(tcp::no_delay(true), ec);
            start_session(std::move(socket), std::move(slot), std::move(remote));
        }
        do_accept();
    }

    void start_session(tcp::socket socket, connection_limiter::slot slot, std::string remote) {
        if (tls)
            start_tls_session(std::move(socket), *tls, ctx, std::move(slot), std::move(remote));
        else
            start_plain_session(std::move(socket), ctx, std::move(slot), std::move(remote));
    }

    void refuse(tcp::socket socket, const std::string& remote) {
        ++ctx.metrics.connections_refused;
        beast::error_code ec;
        socket.non_blocking(true, ec);
        if (!tls) socket.write_some(asio::buffer(over_capacity_response), ec);
        socket.close(ec);
        rate_limited_log("refused a connection from " + remote + ": at the connection cap (" +
                         std::to_string(ctx.connections.open()) + " open)");
    }

    // The failed connection stays in the backlog, so accepting again at once
    // would fail again at once: wait, and let connections close meanwhile.
    void back_off(const beast::error_code& ec) {
        if (out_of_resources(ec)) rate_limited_log("accept failed (" + ec.message() + "); retrying in 100 ms");
        else spdlog::warn("accept failed: {}", ec.message());
        retry.expires_after(accept_backoff);
        retry.async_wait([self = shared_from_this()](beast::error_code e) {
            if (!e && self->acceptor.is_open()) self->do_accept();
        });
    }

    void rate_limited_log(const std::string& line) {
        const auto now = std::chrono::steady_clock::now();
        ++suppressed;
        if (now - last_log < log_interval) return;
        spdlog::warn("{} ({} such event(s) since the last line)", line, suppressed);
        suppressed = 0;
        last_log = now;
    }

    asio::io_context& ioc;
    server_context& ctx;
    std::shared_ptr<asio::ssl::context> tls;
    tcp::acceptor acceptor;
    asio::steady_timer retry;
    std::chrono::steady_clock::time_point last_log{};
    std::size_t suppressed = 0;
};

listener::listener(asio::io_context& ioc, server_context& ctx, std::shared_ptr<asio::ssl::context> tls)
    : impl_(std::make_shared<impl>(ioc, ctx, std::move(tls))) {}

listener::~listener() = default;

unsigned short listener::listen() {
    auto& a = impl_->acceptor;
    const tcp::endpoint ep(asio::ip::make_address(impl_->ctx.options.ip), impl_->ctx.options.port);
    a.open(ep.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    a.bind(ep);
    a.listen(asio::socket_base::max_listen_connections);
    impl_->do_accept();
    return a.local_endpoint().port();
}

void listener::stop() {
    asio::post(impl_->acceptor.get_executor(), [self = impl_] {
        beast::error_code ec;
        self->acceptor.close(ec);
        self->retry.cancel();
    });
    for (auto& c : impl_->ctx.live_sockets()) c->shutdown("server shutting down");
}

}  // namespace cellgate::http
