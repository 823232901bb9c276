// TLS interception: which CONNECTs the proxy terminates (all, or those to
// hosts it adds credentials for), the client's TLS with a certificate from
// the gateway's CA, the upstream's TLS with the host's certificate verified,
// and the one request between them. It owns the two TLS streams of a
// terminated tunnel; the CA and the upstream context are the options'.

#include "egress/proxy_internal.hpp"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>

namespace cellgate::egress {

bool proxy::impl::intercepts(const impl& self, const session_rules& rules, const std::string& host,
                             std::uint16_t port) {
    if (!self.opt.tls_authority || !self.opt.upstream_tls) return false;
    if (self.opt.intercept_all_tls) return true;
    return std::any_of(rules.headers.begin(), rules.headers.end(),
                       [&](const injected_header& h) { return h.domain.matches(host, std::nullopt, port); });
}

awaitable<void> proxy::impl::intercept(std::shared_ptr<impl> selfp, std::shared_ptr<connection> cp,
                                       const session_rules& rules, connection_record& rec, const proxy_request& req,
                                       std::string rest) {
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

awaitable<void> proxy::impl::serve_terminated(impl& self, connection& c,
                                              asio::ssl::stream<local::socket&>& client_tls, const session_rules& rules,
                                              connection_record& rec, const proxy_request& req) {
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
                         std::string_view(buf).substr(0, inner.head_bytes), buf.substr(inner.head_bytes), true);
}

std::string proxy::ca_certificate_pem() const {
    return impl_->opt.tls_authority && impl_->opt.upstream_tls ? impl_->opt.tls_authority->certificate_pem() : std::string();
}

}  // namespace cellgate::egress
