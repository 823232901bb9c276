#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include "egress/proxy.hpp"

#include "egress/sniff.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <deque>
#include <mutex>
#include <set>
#include <system_error>

namespace cellgate::egress {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using steady = std::chrono::steady_clock;

namespace {

constexpr std::size_t max_head = 16384;
// Per direction and connection: a TLS record's size, so an idle tunnel costs
// tens of KiB, not hundreds (bench/egress.py measures it).
constexpr std::size_t buffer_bytes = 16384;

std::int64_t unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

tcp::endpoint to_endpoint(const address& a, std::uint16_t port) {
    if (a.v4) {
        asio::ip::address_v4::bytes_type b{a.bytes[12], a.bytes[13], a.bytes[14], a.bytes[15]};
        return {asio::ip::address_v4(b), port};
    }
    asio::ip::address_v6::bytes_type b;
    std::copy(a.bytes.begin(), a.bytes.end(), b.begin());
    return {asio::ip::address_v6(b), port};
}

std::optional<address> from_endpoint(const tcp::endpoint& e) { return address::parse(e.address().to_string()); }

std::string response(int status, std::string_view reason, std::string_view body) {
    std::string r = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                    "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nX-Cellgate-Egress: refused"
                    "\r\nContent-Length: " +
                    std::to_string(body.size() + 1) + "\r\n\r\n";
    r += body;
    r += '\n';
    return r;
}

// The header lines of a request head (after the request line, before the
// blank line), as name/value pairs.
std::vector<std::pair<std::string, std::string>> header_lines(std::string_view head) {
    std::vector<std::pair<std::string, std::string>> out;
    auto pos = head.find("\r\n");
    if (pos == std::string_view::npos) return out;
    head.remove_prefix(pos + 2);
    while (!head.empty()) {
        const auto end = head.find("\r\n");
        const auto line = head.substr(0, end);
        if (line.empty()) break;
        const auto colon = line.find(':');
        if (colon != std::string_view::npos) {
            auto value = line.substr(colon + 1);
            while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
            while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
            out.emplace_back(std::string(line.substr(0, colon)), std::string(value));
        }
        if (end == std::string_view::npos) break;
        head.remove_prefix(end + 2);
    }
    return out;
}

}  // namespace

std::pair<std::string, resolve_entry> parse_resolve_entry(std::string_view text) {
    const auto eq = text.find('=');
    if (eq == std::string_view::npos) throw std::invalid_argument("--egress-resolve wants name=address[:port]");
    const auto name = normalize_host(text.substr(0, eq));
    if (!name) throw std::invalid_argument("--egress-resolve: '" + std::string(text.substr(0, eq)) + "' is not a host name");
    auto target = text.substr(eq + 1);
    std::string_view addr = target, port;
    if (target.starts_with('[')) {
        const auto close = target.find(']');
        if (close == std::string_view::npos) throw std::invalid_argument("--egress-resolve: unclosed '['");
        addr = target.substr(1, close - 1);
        if (close + 1 < target.size()) {
            if (target[close + 1] != ':') throw std::invalid_argument("--egress-resolve: junk after ']'");
            port = target.substr(close + 2);
        }
    } else if (const auto colon = target.rfind(':'); colon != std::string_view::npos && target.find(':') == colon) {
        addr = target.substr(0, colon);
        port = target.substr(colon + 1);
    }
    resolve_entry e;
    const auto a = address::parse(addr);
    if (!a) throw std::invalid_argument("--egress-resolve: '" + std::string(addr) + "' is not an IP address");
    e.addr = *a;
    if (!port.empty()) {
        unsigned v = 0;
        const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
        if (ec != std::errc() || end != port.data() + port.size() || v == 0 || v > 65535)
            throw std::invalid_argument("--egress-resolve: bad port '" + std::string(port) + "'");
        e.port = static_cast<std::uint16_t>(v);
    }
    return {*name, e};
}

nlohmann::json to_json(const connection_record& r) {
    return {{"seq", r.seq},
            {"time_ms", r.time_ms},
            {"duration_ms", r.duration_ms},
            {"method", r.method},
            {"host", r.host},
            {"port", r.port},
            {"address", r.address},
            {"bytes_up", r.bytes_up},
            {"bytes_down", r.bytes_down},
            {"verdict", r.allowed ? "allowed" : "refused"},
            {"rule", r.rule},
            {"reason", r.reason},
            {"credential_injected", r.injected},
            {"tls_terminated", r.tls_terminated}};
}

struct proxy::impl : std::enable_shared_from_this<proxy::impl> {
    struct connection {
        explicit connection(const asio::any_io_executor& ex) : upstream(ex), timer(ex) {}
        std::optional<local::socket> client;
        tcp::socket upstream;
        asio::steady_timer timer;
        steady::time_point deadline;
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

    impl(asio::io_context& io, proxy_options o) : ioc(io), opt(std::move(o)) {}

    void finish(const std::shared_ptr<session_state>& s, connection_record rec,
                const std::shared_ptr<connection>& c) {
        std::function<void(const std::string&, const connection_record&)> cb;
        {
            std::lock_guard lock(mutex);
            if (c) {
                s->connections.erase(c);
                --s->open;
                --open_total;
            }
            rec.seq = s->next_seq++;
            s->log.push_back(rec);
            while (s->log.size() > opt.max_log_per_session) s->log.pop_front();
            cb = on_record;
        }
        if (c) --stats.open;
        (rec.allowed ? stats.allowed : stats.refused) += 1;
        stats.bytes_up += rec.bytes_up;
        stats.bytes_down += rec.bytes_down;
        if (cb) cb(s->id, rec);
    }

    void touch(connection& c, std::chrono::milliseconds d) { c.deadline = std::max(c.deadline, steady::now() + d); }

    static awaitable<void> watchdog(std::shared_ptr<connection> c) {
        while (!c->finished) {
            c->timer.expires_at(c->deadline);
            boost::system::error_code ec;
            co_await c->timer.async_wait(asio::redirect_error(use_awaitable, ec));
            if (c->finished) break;
            if (steady::now() >= c->deadline) {
                c->close();
                break;
            }
        }
    }

    void start_accepting(const std::shared_ptr<session_state>& s) {
        asio::co_spawn(ioc, accept_loop(shared_from_this(), s), asio::detached);
    }

    static awaitable<void> accept_loop(std::shared_ptr<impl> self, std::shared_ptr<session_state> s) {
        for (;;) {
            auto strand = asio::make_strand(self->ioc);
            boost::system::error_code ec;
            local::socket sock = co_await s->acceptor->async_accept(strand, asio::redirect_error(use_awaitable, ec));
            if (ec) {
                if (ec == asio::error::operation_aborted || s->detached) co_return;
                // Out of descriptors and the like: wait a moment, not spin.
                asio::steady_timer t(self->ioc, std::chrono::milliseconds(100));
                co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
                continue;
            }
            auto c = std::make_shared<connection>(strand);
            c->client.emplace(std::move(sock));
            std::shared_ptr<const session_rules> rules;
            bool over = false;
            {
                std::lock_guard lock(self->mutex);
                if (s->detached) co_return;
                over = s->open >= self->opt.max_connections_per_session || self->open_total >= self->opt.max_connections;
                if (!over) {
                    ++s->open;
                    ++self->open_total;
                    s->connections.insert(c);
                }
                rules = s->rules;
            }
            if (over) {
                asio::co_spawn(strand, refuse_busy(self, s, c), asio::detached);
                continue;
            }
            ++self->stats.open;
            asio::co_spawn(strand, serve(self, s, c, rules), asio::detached);
        }
    }

    static awaitable<void> refuse_busy(std::shared_ptr<impl> self, std::shared_ptr<session_state> s,
                                       std::shared_ptr<connection> c) {
        connection_record rec;
        rec.time_ms = unix_ms();
        rec.reason = "too many connections";
        boost::system::error_code ec;
        co_await asio::async_write(*c->client, asio::buffer(response(503, "Service Unavailable",
                                                                      "cellgate egress: too many open connections")),
                                   asio::redirect_error(use_awaitable, ec));
        c->close();
        self->finish(s, std::move(rec), nullptr);
    }

    // Every layer must allow; the session's own (first) layer names the rule.
    static policy::verdict judge(const session_rules& rules, std::string_view host, const std::optional<address>& a,
                                 std::uint16_t port) {
        if (rules.layers.empty()) return {false, ""};
        policy::verdict first;
        for (std::size_t i = 0; i < rules.layers.size(); ++i) {
            auto v = rules.layers[i].check(host, a, port);
            if (!v.allowed) {
                if (i > 0) v.rule = v.rule.empty() ? "(beyond the tenant's maximum)" : v.rule + " (tenant)";
                return v;
            }
            if (i == 0) first = v;
        }
        return first;
    }

    bool internal_allowed(const address& a) const {
        return std::any_of(opt.internal_allowed.begin(), opt.internal_allowed.end(),
                           [&](const cidr& c) { return c.contains(a); });
    }

    static bool is_local_port(impl& self, std::uint16_t port) {
        std::lock_guard lock(self.mutex);
        return std::find(self.opt.forbidden_ports.begin(), self.opt.forbidden_ports.end(), port) !=
               self.opt.forbidden_ports.end();
    }

    static awaitable<void> serve(std::shared_ptr<impl> self, std::shared_ptr<session_state> s,
                                 std::shared_ptr<connection> c, std::shared_ptr<const session_rules> rules) {
        connection_record rec;
        rec.time_ms = unix_ms();
        const auto t0 = steady::now();
        c->deadline = t0 + self->opt.head_timeout;
        asio::co_spawn(c->timer.get_executor(), watchdog(c), asio::detached);
        try {
            co_await handle(self, c, *rules, rec);
        } catch (const std::exception& e) {
            if (rec.reason.empty()) rec.reason = std::string("ended: ") + e.what();
        }
        c->finished = true;
        c->close();  // ends the tunnel's other direction and the watchdog
        rec.bytes_up = c->up;
        rec.bytes_down = c->down;
        rec.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
        self->finish(s, std::move(rec), c);
    }

    static awaitable<void> refuse(connection& c, connection_record& rec, int status, std::string_view reason,
                                  std::string why) {
        co_await refuse_on(*c.client, rec, status, reason, std::move(why));
    }

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
    };

    static awaitable<target> choose(impl& self, const session_rules& rules, const std::string& host,
                                    std::uint16_t port) {
        target t;
        std::vector<address> candidates;
        std::uint16_t dial_port = port;
        bool operator_named = false;
        if (const auto it = self.opt.resolve.find(host); it != self.opt.resolve.end()) {
            candidates.push_back(it->second.addr);
            if (it->second.port) dial_port = it->second.port;
            operator_named = true;
        } else if (const auto literal = address::parse(host)) {
            candidates.push_back(*literal);
        } else {
            // Judge the name before resolving: a name no rule can allow is
            // never looked up (only network rules could still allow it).
            const auto by_name = judge(rules, host, std::nullopt, port);
            const bool by_address = std::any_of(rules.layers.front().allow.begin(), rules.layers.front().allow.end(),
                                                [](const rule& r) { return r.what == rule::kind::network; });
            if (!by_name.allowed && (!by_name.rule.empty() || !by_address)) {
                t.refusal = by_name.rule.empty() ? "not allowed by the session's network policy" : "denied by " + by_name.rule;
                co_return t;
            }
            tcp::resolver resolver(co_await asio::this_coro::executor);
            boost::system::error_code ec;
            const auto results =
                co_await resolver.async_resolve(host, std::to_string(port), asio::redirect_error(use_awaitable, ec));
            if (ec) {
                t.refusal = "cannot resolve the name (" + ec.message() + ")";
                co_return t;
            }
            for (const auto& r : results)
                if (const auto a = from_endpoint(r.endpoint())) candidates.push_back(*a);
        }
        for (const auto& a : candidates) {
            t.address = a.to_string();
            const auto v = judge(rules, host, a, port);
            if (!v.allowed) {
                t.refusal = v.rule.empty() ? "not allowed by the session's network policy" : "denied by " + v.rule;
                continue;
            }
            if (!operator_named && is_internal(a) && !self.internal_allowed(a)) {
                t.refusal = "the name resolves to an internal address (" + a.to_string() + ")";
                continue;
            }
            if ((is_internal(a) || operator_named) && is_local_port(self, dial_port)) {
                t.refusal = "the gateway's own port";
                continue;
            }
            t.rule = v.rule;
            t.endpoint = to_endpoint(a, dial_port);
            t.refusal.clear();
            co_return t;
        }
        if (t.refusal.empty()) t.refusal = "no address";
        co_return t;
    }

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
                                  connection_record& rec) {
        impl& self = *selfp;
        connection& c = *cp;
        std::string buf;
        std::vector<char> chunk(buffer_bytes);
        const auto req = co_await read_head(*c.client, buf, chunk, rec, "malformed proxy request: ",
                                            [](std::string_view b) { return parse_proxy_request(b, max_head); });
        if (req.status != sniff_status::complete) co_return;
        rec.method = req.method;
        rec.host = req.host;
        rec.port = req.port;
        const auto t = co_await choose(self, rules, req.host, req.port);
        rec.address = t.address;
        if (!t.endpoint) {
            co_await refuse(c, rec, 403, "Forbidden", t.refusal);
            co_return;
        }
        rec.rule = t.rule;
        c.deadline = steady::now() + self.opt.connect_timeout;
        boost::system::error_code ec;
        co_await c.upstream.async_connect(*t.endpoint, asio::redirect_error(use_awaitable, ec));
        if (ec) {
            co_await refuse(c, rec, 502, "Bad Gateway", "cannot connect (" + ec.message() + ")");
            co_return;
        }
        rec.allowed = true;
        c.upstream.set_option(tcp::no_delay(true), ec);  // our writes are whole messages: send them now
        c.deadline = steady::now() + self.opt.idle_timeout;
        std::string rest = buf.substr(req.head_bytes);
        if (req.method == "CONNECT" && intercepts(self, rules, req.host, req.port)) {
            std::vector<char>().swap(chunk);
            std::string().swap(buf);
            co_await intercept(selfp, cp, rules, rec, req, std::move(rest));
            co_return;
        }
        if (req.method == "CONNECT") {
            co_await asio::async_write(*c.client, asio::buffer(std::string_view("HTTP/1.1 200 Connection established\r\n\r\n")),
                                       use_awaitable);
            // A TLS ClientHello names its server: that name must be allowed too.
            while (rest.size() < max_head) {
                if (!rest.empty() && rest[0] != 0x16) break;  // not TLS: tunnelled as it is
                if (!rest.empty()) {
                    const auto sn = tls_server_name(rest);
                    if (sn.status == sniff_status::complete) {
                        if (!sn.name.empty() && lower(sn.name) != req.host) {
                            const auto v = judge(rules, lower(sn.name), from_endpoint(*t.endpoint), req.port);
                            if (!v.allowed) {
                                rec.allowed = false;
                                rec.reason = "TLS server name '" + sn.name + "' is not allowed";
                                co_return;
                            }
                        }
                        break;
                    }
                    if (sn.status == sniff_status::malformed) break;
                }
                const auto n = co_await c.client->async_read_some(asio::buffer(chunk), use_awaitable);
                rest.append(chunk.data(), n);
                self.touch(c, self.opt.idle_timeout);
            }
            c.up += rest.size();
            co_await asio::async_write(c.upstream, asio::buffer(rest), use_awaitable);
            // The head's buffers are not needed while the tunnel lasts.
            std::vector<char>().swap(chunk);
            std::string().swap(buf);
            std::string().swap(rest);
            co_await splice(selfp, cp);
            rec.reason = "closed";
            co_return;
        }
        // A plain request, forwarded once with Connection: close.
        co_await forward_one(self, c, *c.client, c.upstream, rules, rec, req, std::string_view(buf).substr(0, req.head_bytes),
                             std::move(rest));
    }

    // Whether a CONNECT to host:port is terminated here: the operator asked
    // for all, or a credential is to be added for that host.
    static bool intercepts(const impl& self, const session_rules& rules, const std::string& host, std::uint16_t port) {
        if (!self.opt.tls_authority || !self.opt.upstream_tls) return false;
        if (self.opt.intercept_all_tls) return true;
        return std::any_of(rules.headers.begin(), rules.headers.end(),
                           [&](const injected_header& h) { return h.domain.matches(host, std::nullopt, port); });
    }

    // A CONNECT the proxy terminates: TLS towards the client with a
    // certificate for the host from the gateway's CA, TLS towards upstream
    // with full verification of the host's own certificate, and in between
    // one plain request, whose Host must be the tunnel's, with the
    // credentials added.
    static awaitable<void> intercept(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp, const session_rules& rules,
                                     connection_record& rec, const proxy_request& req, std::string rest) {
        impl& self = *selfp;
        connection& c = *cp;
        if (!rest.empty()) {
            rec.allowed = false;
            rec.reason = "bytes sent before the tunnel was established";
            co_return;
        }
        co_await asio::async_write(*c.client, asio::buffer(std::string_view("HTTP/1.1 200 Connection established\r\n\r\n")),
                                   use_awaitable);
        std::shared_ptr<asio::ssl::context> server_ctx;
        try {
            server_ctx = self.opt.tls_authority->server_context(req.host);
        } catch (const std::exception& e) {
            rec.allowed = false;
            rec.reason = std::string("no certificate for the host: ") + e.what();
            co_return;
        }
        asio::ssl::stream<local::socket&> client_tls(*c.client, *server_ctx);
        boost::system::error_code ec;
        co_await client_tls.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(use_awaitable, ec));
        if (ec) {
            rec.reason = "the client's TLS handshake failed (does it trust the gateway's egress CA?): " + ec.message();
            co_return;
        }
        self.touch(c, self.opt.idle_timeout);
        rec.tls_terminated = true;
        co_await serve_terminated(self, c, client_tls, rules, rec, req);
        // close_notify, so the client reads a clean end; at most 2 s for its reply.
        c.deadline = steady::now() + std::chrono::seconds(2);
        c.timer.cancel();
        co_await client_tls.async_shutdown(asio::redirect_error(use_awaitable, ec));
    }

    // Inside the client's TLS: the upstream's TLS, then one request.
    static awaitable<void> serve_terminated(impl& self, connection& c, asio::ssl::stream<local::socket&>& client_tls,
                                            const session_rules& rules, connection_record& rec, const proxy_request& req) {
        boost::system::error_code ec;
        if (const char* sni = SSL_get_servername(client_tls.native_handle(), TLSEXT_NAMETYPE_host_name);
            sni && lower(sni) != req.host) {
            const auto v = judge(rules, lower(sni), std::nullopt, req.port);
            if (!v.allowed) {
                co_await refuse_on(client_tls, rec, 403, "Forbidden", "TLS server name '" + std::string(sni) + "' is not allowed");
                co_return;
            }
        }
        asio::ssl::stream<tcp::socket&> upstream_tls(c.upstream, *self.opt.upstream_tls);
        if (!verify_upstream_host(upstream_tls.native_handle(), req.host)) {
            co_await refuse_on(client_tls, rec, 502, "Bad Gateway", "cannot set up TLS towards the host");
            co_return;
        }
        co_await upstream_tls.async_handshake(asio::ssl::stream_base::client, asio::redirect_error(use_awaitable, ec));
        if (ec) {
            const auto result = SSL_get_verify_result(upstream_tls.native_handle());
            const std::string why = result != X509_V_OK ? X509_verify_cert_error_string(result) : ec.message();
            co_await refuse_on(client_tls, rec, 502, "Bad Gateway", "the upstream's TLS was not accepted: " + why);
            co_return;
        }
        // The request head, as in handle(), but in origin form.
        std::string buf;
        std::vector<char> chunk(buffer_bytes);
        const auto inner = co_await read_head(client_tls, buf, chunk, rec, "malformed request: ", [&req](std::string_view b) {
            return parse_origin_request(b, req.port, max_head);
        });
        if (inner.status != sniff_status::complete) co_return;
        // Domain fronting: the Host inside must be the tunnel's own.
        if (inner.host != req.host || inner.port != req.port) {
            co_await refuse_on(client_tls, rec, 421, "Misdirected Request",
                               "the request names " + inner.host + ":" + std::to_string(inner.port) + " inside a tunnel to " +
                                   req.host + ":" + std::to_string(req.port));
            co_return;
        }
        rec.method = "CONNECT " + inner.method;
        co_await forward_one(self, c, client_tls, upstream_tls, rules, rec, inner,
                             std::string_view(buf).substr(0, inner.head_bytes), buf.substr(inner.head_bytes));
    }

    // One request (its head already read and judged) forwarded upstream
    // with Connection: close and the credentials for its host, then the
    // response back until upstream ends. Chunked bodies are refused, so the
    // end of the request is known and nothing after it is read.
    template <class Client, class Upstream>
    static awaitable<void> forward_one(impl& self, connection& c, Client& client, Upstream& upstream,
                                       const session_rules& rules, connection_record& rec, const proxy_request& req,
                                       std::string_view head, std::string rest) {
        const auto headers = header_lines(head);
        std::uint64_t body = 0;
        std::string out = req.method + " " + req.target + " HTTP/1.1\r\n";
        const auto& inject = rules.headers;
        auto injected_for = [&](std::string_view name) {
            for (const auto& h : inject)
                if (lower(h.header) == lower(name) && h.domain.matches(req.host, std::nullopt, req.port)) return true;
            return false;
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
        for (const auto& h : inject)
            if (h.domain.matches(req.host, std::nullopt, req.port)) {
                out += h.header + ": " + h.value + "\r\n";
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
    static awaitable<void> splice(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp) {
        impl& self = *selfp;
        connection& c = *cp;
        asio::co_spawn(c.upstream.get_executor(), pump_up(selfp, cp), asio::detached);
        std::vector<char> chunk(buffer_bytes);
        for (;;) {
            boost::system::error_code ec;
            const auto n = co_await c.upstream.async_read_some(asio::buffer(chunk), asio::redirect_error(use_awaitable, ec));
            if (ec) break;
            c.down += n;
            self.touch(c, self.opt.idle_timeout);
            co_await asio::async_write(*c.client, asio::buffer(chunk.data(), n), asio::redirect_error(use_awaitable, ec));
            if (ec) break;
        }
    }

    static awaitable<void> pump_up(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp) {
        impl& self = *selfp;
        connection& c = *cp;
        std::vector<char> chunk(buffer_bytes);
        for (;;) {
            boost::system::error_code ec;
            const auto n = co_await c.client->async_read_some(asio::buffer(chunk), asio::redirect_error(use_awaitable, ec));
            if (ec) {
                c.upstream.shutdown(tcp::socket::shutdown_send, ec);
                co_return;
            }
            c.up += n;
            self.touch(c, self.opt.idle_timeout);
            co_await asio::async_write(c.upstream, asio::buffer(chunk.data(), n), asio::redirect_error(use_awaitable, ec));
            if (ec) co_return;
        }
    }
};

proxy::proxy(asio::io_context& ioc, proxy_options options) : impl_(std::make_shared<impl>(ioc, std::move(options))) {}

proxy::~proxy() { stop(); }

void proxy::attach(const std::string& session, const std::filesystem::path& socket, session_rules rules) {
    auto s = std::make_shared<impl::session_state>();
    s->id = session;
    s->socket = socket;
    s->rules = std::make_shared<const session_rules>(std::move(rules));
    ::unlink(socket.c_str());
    s->acceptor.emplace(impl_->ioc);
    s->acceptor->open();
    // A unix socket's path holds 107 bytes, and the session's directory sits
    // as deep as the state dir: bound through a descriptor of the directory,
    // the path is /proc/self/fd/N/proxy.sock however deep it is.
    const int dir = ::open(socket.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) throw std::system_error(errno, std::generic_category(), "egress: open " + socket.parent_path().string());
    boost::system::error_code bind_error;
    s->acceptor->bind(local::endpoint("/proc/self/fd/" + std::to_string(dir) + "/" + socket.filename().string()),
                      bind_error);
    ::close(dir);
    if (bind_error) throw boost::system::system_error(bind_error, "egress: bind " + socket.string());
    // The sandbox's uid is not ours: anyone who can reach the path may
    // connect (the directory is this session's only, mounted in its sandbox).
    ::chmod(socket.c_str(), 0666);
    s->acceptor->listen(64);
    {
        std::lock_guard lock(impl_->mutex);
        if (const auto it = impl_->sessions.find(session); it != impl_->sessions.end()) {
            s->log = std::move(it->second->log);
            s->next_seq = it->second->next_seq;
            it->second->detached = true;
            boost::system::error_code ec;
            it->second->acceptor->close(ec);
        }
        impl_->sessions[session] = s;
    }
    impl_->start_accepting(s);
}

bool proxy::set_rules(const std::string& session, session_rules rules) {
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->sessions.find(session);
    if (it == impl_->sessions.end()) return false;
    it->second->rules = std::make_shared<const session_rules>(std::move(rules));
    return true;
}

void proxy::detach(const std::string& session) {
    std::shared_ptr<impl::session_state> s;
    {
        std::lock_guard lock(impl_->mutex);
        const auto it = impl_->sessions.find(session);
        if (it == impl_->sessions.end()) return;
        s = it->second;
        impl_->sessions.erase(it);
        s->detached = true;
    }
    asio::post(impl_->ioc, [s] {
        boost::system::error_code ec;
        if (s->acceptor) s->acceptor->close(ec);
    });
    std::set<std::shared_ptr<impl::connection>> conns;
    {
        std::lock_guard lock(impl_->mutex);
        conns = s->connections;
    }
    for (const auto& c : conns) asio::post(c->timer.get_executor(), [c] { c->close(); });
    ::unlink(s->socket.c_str());
}

bool proxy::attached(const std::string& session) const {
    std::lock_guard lock(impl_->mutex);
    return impl_->sessions.count(session) != 0;
}

void proxy::restore_log(const std::string& session, std::vector<connection_record> earlier) {
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->sessions.find(session);
    if (it == impl_->sessions.end()) return;
    auto& s = *it->second;
    std::sort(earlier.begin(), earlier.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
    std::deque<connection_record> merged(earlier.begin(), earlier.end());
    for (auto& r : s.log) merged.push_back(std::move(r));
    while (merged.size() > impl_->opt.max_log_per_session) merged.pop_front();
    s.log = std::move(merged);
    if (!earlier.empty()) s.next_seq = std::max(s.next_seq, earlier.back().seq + 1);
}

std::vector<connection_record> proxy::log(const std::string& session, std::uint64_t after, std::size_t limit) const {
    std::vector<connection_record> out;
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->sessions.find(session);
    if (it == impl_->sessions.end()) return out;
    for (const auto& r : it->second->log) {
        if (r.seq <= after) continue;
        if (out.size() >= limit) break;
        out.push_back(r);
    }
    return out;
}

void proxy::on_record(std::function<void(const std::string&, const connection_record&)> f) {
    std::lock_guard lock(impl_->mutex);
    impl_->on_record = std::move(f);
}

const proxy::counters& proxy::stats() const noexcept { return impl_->stats; }

void proxy::render_metrics(std::string& out) const {
    const auto& s = impl_->stats;
    out += "# HELP cellgate_egress_connections_total Egress proxy connections by verdict.\n"
           "# TYPE cellgate_egress_connections_total counter\n";
    out += "cellgate_egress_connections_total{verdict=\"allowed\"} " + std::to_string(s.allowed.load()) + "\n";
    out += "cellgate_egress_connections_total{verdict=\"refused\"} " + std::to_string(s.refused.load()) + "\n";
    out += "# HELP cellgate_egress_bytes_total Bytes through the egress proxy.\n"
           "# TYPE cellgate_egress_bytes_total counter\n";
    out += "cellgate_egress_bytes_total{direction=\"up\"} " + std::to_string(s.bytes_up.load()) + "\n";
    out += "cellgate_egress_bytes_total{direction=\"down\"} " + std::to_string(s.bytes_down.load()) + "\n";
    out += "# HELP cellgate_egress_open_connections Egress proxy connections open now.\n"
           "# TYPE cellgate_egress_open_connections gauge\n";
    out += "cellgate_egress_open_connections " + std::to_string(s.open.load()) + "\n";
}

std::string proxy::ca_certificate_pem() const {
    return impl_->opt.tls_authority && impl_->opt.upstream_tls ? impl_->opt.tls_authority->certificate_pem() : std::string();
}

void proxy::forbid_port(std::uint16_t port) {
    std::lock_guard lock(impl_->mutex);
    impl_->opt.forbidden_ports.push_back(port);
}

void proxy::stop() {
    std::vector<std::string> ids;
    {
        std::lock_guard lock(impl_->mutex);
        for (const auto& [id, s] : impl_->sessions) ids.push_back(id);
    }
    for (const auto& id : ids) detach(id);
}

}  // namespace cellgate::egress
