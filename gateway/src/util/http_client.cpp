#include "util/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace cellgate::util {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

// Writes the request and reads the answer on `stream` (plain or TLS), once connected.
template <class Stream>
void exchange(Stream& stream, bhttp::request<bhttp::string_body>& req, bhttp::response<bhttp::string_body>& res,
              beast::flat_buffer& buffer, boost::system::error_code& failed) {
    bhttp::async_write(stream, req, [&](boost::system::error_code ec3, std::size_t) {
        if (ec3) return void(failed = ec3);
        bhttp::async_read(stream, buffer, res, [&](boost::system::error_code ec4, std::size_t) {
            if (ec4) failed = ec4;
        });
    });
}

// Why a call failed. Over TLS 1.3 a server that refuses the client's
// certificate says so after the client's handshake is done: its alert, or a
// reset, comes on the first write or read.
std::string describe(const boost::system::error_code& ec, bool tls, bool handshaken, bool answered) {
    if (ec.category() == asio::error::get_ssl_category())
        return "TLS: " + ec.message() + " (the certificate, its key or the CA does not match)";
    if (tls && handshaken && !answered && ec != asio::error::timed_out && ec != beast::error::timeout)
        return "TLS: the server closed the connection after the handshake (" + ec.message() +
               "): it did not take this client's certificate";
    return ec.message();
}

}  // namespace

http_reply http_call(const std::string& method, const std::string& host, const std::string& port,
                     const std::string& target, const std::vector<std::pair<std::string, std::string>>& headers,
                     const std::string& body, std::chrono::milliseconds timeout, const asio::ssl::context* tls) {
    asio::io_context ioc;
    beast::tcp_stream plain(ioc);
    std::optional<asio::ssl::stream<beast::tcp_stream&>> secure;
    bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
    const bool v6 = host.find(':') != std::string::npos;
    req.set(bhttp::field::host, (v6 ? "[" + host + "]" : host) + ":" + port);
    for (const auto& [name, value] : headers) req.set(name, value);
    if (!body.empty()) {
        req.body() = body;
        req.prepare_payload();
    }
    if (tls != nullptr) {
        secure.emplace(plain, const_cast<asio::ssl::context&>(*tls));
        auto* ssl = secure->native_handle();
        boost::system::error_code not_ip;
        asio::ip::make_address(host, not_ip);
        auto* param = SSL_get0_param(ssl);
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        // SNI as SSL_set_tlsext_host_name sets it, without its macro's C cast.
        const bool named = not_ip ? X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) == 1 &&
                                        SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                                                 const_cast<char*>(host.c_str())) == 1
                                  : X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1;
        if (!named) throw http_failure(host + ":" + port + ": cannot check a certificate for that host");
        secure->set_verify_mode(asio::ssl::verify_peer);
    }
    bhttp::response<bhttp::string_body> res;
    beast::flat_buffer buffer;
    boost::system::error_code failed;
    bool handshaken = false;
    asio::ip::tcp::resolver resolver(ioc);
    plain.expires_after(timeout);
    resolver.async_resolve(host, port, [&](boost::system::error_code ec, auto results) {
        if (ec) return void(failed = ec);
        plain.async_connect(results, [&](boost::system::error_code ec2, auto) {
            if (ec2) return void(failed = ec2);
            if (!secure) return exchange(plain, req, res, buffer, failed);
            secure->async_handshake(asio::ssl::stream_base::client, [&](boost::system::error_code ec5) {
                if (ec5) return void(failed = ec5);
                handshaken = true;
                exchange(*secure, req, res, buffer, failed);
            });
        });
    });
    // The stream's deadline ends a hung connect, handshake, write or read;
    // this bounds the name lookup too.
    ioc.run_for(timeout + std::chrono::milliseconds(100));
    if (!ioc.stopped()) failed = asio::error::timed_out;
    if (failed)
        throw http_failure(host + ":" + port + ": " + describe(failed, tls != nullptr, handshaken, buffer.size() > 0));
    return {res.result_int(), std::move(res.body())};
}

std::shared_ptr<asio::ssl::context> make_tls_client(const std::filesystem::path& ca_file,
                                                    const std::filesystem::path& cert_file,
                                                    const std::filesystem::path& key_file) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
    auto load = [](const std::string& what, const std::filesystem::path& file, auto&& step) {
        boost::system::error_code ec;
        step(ec);
        if (ec) throw std::runtime_error(what + " " + file.string() + " cannot be used: " + ec.message());
    };
    load("the CA file", ca_file, [&](auto& ec) { ctx->load_verify_file(ca_file.string(), ec); });
    if (!cert_file.empty()) {
        load("the certificate file", cert_file,
             [&](auto& ec) { ctx->use_certificate_chain_file(cert_file.string(), ec); });
        load("the key file", key_file,
             [&](auto& ec) { ctx->use_private_key_file(key_file.string(), asio::ssl::context::pem, ec); });
        if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
            throw std::runtime_error("the key file " + key_file.string() + " is not the certificate's key");
    }
    ctx->set_verify_mode(asio::ssl::verify_peer);
    return ctx;
}

}  // namespace cellgate::util
