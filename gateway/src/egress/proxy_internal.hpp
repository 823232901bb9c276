#pragma once

// What the proxy's parts share: proxy::impl, the proxy's state (its options,
// the sessions it listens for, their logs and the counters), the connection
// each accepted socket becomes, and the request-head helpers that both plain
// connections and terminated TLS use (refuse_on, read_head, forward_one,
// templates over the stream). Each part defines the impl members of the state
// it owns: proxy_listeners.cpp (the sessions' sockets and accept loops),
// proxy_connection.cpp (one connection, from its head to its end),
// proxy_tls.cpp (TLS interception), proxy_log.cpp (the records and counters)
// and proxy.cpp (the options and the small wire helpers).

#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include "egress/proxy.hpp"

#include "egress/host_addresses.hpp"
#include "egress/sniff.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::egress {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using steady = std::chrono::steady_clock;

constexpr std::size_t max_head = 16384;
// Per direction and connection: a TLS record's size, so an idle tunnel costs
// tens of KiB, not hundreds (bench/egress.py measures it).
constexpr std::size_t buffer_bytes = 16384;

// The wire helpers (proxy.cpp).
std::int64_t unix_ms();
std::string lower(std::string_view s);
std::string response(int status, std::string_view reason, std::string_view body);
std::vector<std::pair<std::string, std::string>> header_lines(std::string_view head);

struct proxy::impl : std::enable_shared_from_this<proxy::impl> {
    struct connection {
        explicit connection(const asio::any_io_executor& ex) : upstream(ex), timer(ex) {}
        std::optional<local::socket> client;
        tcp::socket upstream;
        asio::steady_timer timer;
        steady::time_point deadline;
        std::string session;  // whose socket it came in on
        bool finished = false;
        std::uint64_t up = 0, down = 0;
        void close() {
            boost::system::error_code ec;
            if (client) client->close(ec);
            upstream.close(ec);
            timer.cancel();
        }
    };

    struct session_state {
        std::string id;
        std::optional<local::acceptor> acceptor;
        std::filesystem::path socket;
        std::shared_ptr<const session_rules> rules;
        std::deque<connection_record> log;
        std::uint64_t next_seq = 1;
        std::size_t open = 0;
        // The accept rate's bucket (proxy_options::accept_rate; only its accept loop touches it).
        double tokens = 0;
        steady::time_point refilled{};
        std::set<std::shared_ptr<connection>> connections;
        bool detached = false;
    };

    asio::io_context& ioc;
    proxy_options opt;
    mutable std::mutex mutex;
    std::map<std::string, std::shared_ptr<session_state>> sessions;
    std::function<void(const std::string&, const connection_record&)> on_record;
    counters stats;
    std::size_t open_total = 0;
    std::unique_ptr<resolver_pool> resolver;
    std::unique_ptr<host_addresses> own;  // the host's addresses: internal, whatever their kind

    impl(asio::io_context& io, proxy_options o)
        : ioc(io), opt(std::move(o)), resolver(std::make_unique<resolver_pool>(opt.dns)),
          own(std::make_unique<host_addresses>(opt.watch_host_addresses)) {}

    void finish(const std::shared_ptr<session_state>& s, connection_record rec,
                const std::shared_ptr<connection>& c);

    void touch(connection& c, std::chrono::milliseconds d) { c.deadline = std::max(c.deadline, steady::now() + d); }

    static awaitable<void> watchdog(std::shared_ptr<connection> c);

    void start_accepting(const std::shared_ptr<session_state>& s);

    static awaitable<void> accept_loop(std::shared_ptr<impl> self, std::shared_ptr<session_state> s);

    static awaitable<void> refuse_busy(std::shared_ptr<impl> self, std::shared_ptr<session_state> s,
                                       std::shared_ptr<connection> c);

    // Every layer must allow; the session's own (first) layer names the rule.
    static policy::verdict judge(const session_rules& rules, std::string_view host, const std::optional<address>& a,
                                 std::uint16_t port);

    bool internal_allowed(const address& a) const;

    static bool is_local_port(impl& self, std::uint16_t port);

    static awaitable<void> serve(std::shared_ptr<impl> self, std::shared_ptr<session_state> s,
                                 std::shared_ptr<connection> c, std::shared_ptr<const session_rules> rules);

    static awaitable<void> refuse(connection& c, connection_record& rec, int status, std::string_view reason,
                                  std::string why);

    // The refusal page on any stream (the client's socket, or the TLS the
    // proxy terminated): host, port and reason, never a request header.
    template <class Stream>
    static awaitable<void> refuse_on(Stream& client, connection_record& rec, int status, std::string_view reason,
                                     std::string why) {
        rec.allowed = false;
        rec.reason = why;
        std::string body = "cellgate egress: ";
        if (!rec.host.empty()) body += rec.host + ":" + std::to_string(rec.port) + ": ";
        body += why;
        boost::system::error_code ec;
        co_await asio::async_write(client, asio::buffer(response(status, reason, body)),
                                   asio::redirect_error(use_awaitable, ec));
    }

    // Where a (host, port) may go: the first candidate address that every
    // layer allows and that is not internal (unless the operator said so).
    struct target {
        std::optional<tcp::endpoint> endpoint;
        std::string rule, refusal, address;
        bool busy = false;  // refused past a bound on lookups (503), not by the policy
    };

    static awaitable<target> choose(impl& self, const session_rules& rules, const std::string& session,
                                    const std::string& host, std::uint16_t port);

    // Whether `a` counts as internal: its kind (is_internal) or one of the host's own.
    bool internal(const address& a) const { return is_internal(a) || own->contains(a); }

    // The accept rate: whether the session may have one more connection now
    // (takes a token); `wait` is how long until it may.
    bool admit(session_state& s, steady::duration& wait);

    // Reads a request head (at most max_head bytes) into `buf` until `parse`
    // says it is complete; answers 400/431 on the same stream otherwise.
    // The result's status is complete only when the caller may go on.
    template <class Stream, class Parse>
    static awaitable<proxy_request> read_head(Stream& client, std::string& buf, std::vector<char>& chunk,
                                              connection_record& rec, std::string_view what, Parse parse) {
        for (;;) {
            boost::system::error_code ec;
            const auto n = co_await client.async_read_some(
                asio::buffer(chunk.data(), std::min(chunk.size(), max_head - buf.size() + 1)), asio::redirect_error(use_awaitable, ec));
            if (ec) {
                rec.reason = "closed before a request";
                co_return proxy_request{};
            }
            buf.append(chunk.data(), n);
            auto req = parse(std::string_view(buf));
            if (req.status == sniff_status::complete) co_return req;
            if (req.status == sniff_status::malformed) {
                co_await refuse_on(client, rec, 400, "Bad Request", std::string(what) + req.error);
                co_return req;
            }
            if (buf.size() >= max_head) {
                co_await refuse_on(client, rec, 431, "Request Header Fields Too Large", "request head over 16 KiB");
                proxy_request over;
                over.status = sniff_status::malformed;
                co_return over;
            }
        }
    }

    static awaitable<void> handle(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp, const session_rules& rules,
                                  connection_record& rec);

    // Whether a CONNECT to host:port is terminated here: the operator asked
    // for all, or a credential is to be added for that host.
    static bool intercepts(const impl& self, const session_rules& rules, const std::string& host, std::uint16_t port);

    // A CONNECT the proxy terminates: TLS towards the client with a
    // certificate for the host from the gateway's CA, TLS towards upstream
    // with full verification of the host's own certificate, and in between
    // one plain request, whose Host must be the tunnel's, with the
    // credentials added.
    static awaitable<void> intercept(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp, const session_rules& rules,
                                     connection_record& rec, const proxy_request& req, std::string rest);

    // Inside the client's TLS: the upstream's TLS, then one request.
    static awaitable<void> serve_terminated(impl& self, connection& c, asio::ssl::stream<local::socket&>& client_tls,
                                            const session_rules& rules, connection_record& rec, const proxy_request& req);

    // One request (its head already read and judged) forwarded upstream
    // with Connection: close and the credentials for its host, then the
    // response back until upstream ends. Chunked bodies are refused, so the
    // end of the request is known and nothing after it is read.
    template <class Client, class Upstream>
    static awaitable<void> forward_one(impl& self, connection& c, Client& client, Upstream& upstream,
                                       const session_rules& rules, connection_record& rec, const proxy_request& req,
                                       std::string_view head, std::string rest, bool over_tls) {
        const auto headers = header_lines(head);
        std::uint64_t body = 0;
        std::string out = req.method + " " + req.target + " HTTP/1.1\r\n";
        std::vector<const injected_header*> inject;
        for (const auto& h : rules.headers)
            if (h.applies(req.host, req.port, req.method, over_tls)) inject.push_back(&h);
        auto injected_for = [&](std::string_view name) {
            return std::any_of(inject.begin(), inject.end(), [&](const auto* h) { return lower(h->header) == lower(name); });
        };
        for (const auto& [name, value] : headers) {
            const auto n = lower(name);
            if (n == "transfer-encoding") {
                co_await refuse_on(client, rec, 411, "Length Required", "chunked request bodies are not forwarded");
                co_return;
            }
            if (n == "content-length") {
                const auto [end, err] = std::from_chars(value.data(), value.data() + value.size(), body);
                if (err != std::errc() || end != value.data() + value.size()) {
                    co_await refuse_on(client, rec, 400, "Bad Request", "bad Content-Length");
                    co_return;
                }
            }
            if (n == "connection" || n == "keep-alive" || n == "proxy-connection" || n == "proxy-authorization" ||
                n == "te" || n == "upgrade" || injected_for(name))
                continue;
            out += name + ": " + value + "\r\n";
        }
        for (const auto* h : inject) {
            out += h->header + ": " + h->value + "\r\n";
            rec.injected = true;
        }
        out += "Connection: close\r\n\r\n";
        const auto first = std::min<std::uint64_t>(body, rest.size());
        out.append(rest, 0, first);
        c.up += out.size();
        co_await asio::async_write(upstream, asio::buffer(out), use_awaitable);
        std::vector<char> chunk(buffer_bytes);
        for (std::uint64_t left = body - first; left > 0;) {
            const auto n = co_await client.async_read_some(asio::buffer(chunk.data(), std::min<std::uint64_t>(chunk.size(), left)),
                                                           use_awaitable);
            left -= n;
            c.up += n;
            self.touch(c, self.opt.idle_timeout);
            co_await asio::async_write(upstream, asio::buffer(chunk.data(), n), use_awaitable);
        }
        for (;;) {
            boost::system::error_code ec;
            const auto n = co_await upstream.async_read_some(asio::buffer(chunk), asio::redirect_error(use_awaitable, ec));
            if (ec) break;  // the end (a TLS peer may end without close_notify: the body is framed or ends here too)
            c.down += n;
            self.touch(c, self.opt.idle_timeout);
            co_await asio::async_write(client, asio::buffer(chunk.data(), n), asio::redirect_error(use_awaitable, ec));
            if (ec) break;
        }
        rec.reason = "closed";
    }

    // A tunnel: upstream to client until upstream ends, and client to
    // upstream at the same time (on the connection's strand). Plain requests
    // go through forward_one instead.
    static awaitable<void> splice(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp);

    static awaitable<void> pump_up(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp);
};

}  // namespace cellgate::egress
