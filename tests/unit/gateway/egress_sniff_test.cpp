// What the egress proxy reads before it decides (egress/sniff.hpp): the SNI
// of a real ClientHello made by OpenSSL here (whole, cut anywhere, split
// across records, without SNI, mangled), and HTTP proxy request heads.
#include "egress/sniff.hpp"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

namespace cellgate::egress {
namespace {

// The first flight of a TLS client, as OpenSSL sends it.
std::string client_hello(const char* server_name) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(ctx);
    BIO* in = BIO_new(BIO_s_mem());
    BIO* out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, in, out);
    if (server_name != nullptr) SSL_set_tlsext_host_name(ssl, server_name);
    SSL_connect(ssl);  // wants to read the server's answer
    char* data = nullptr;
    const long n = BIO_get_mem_data(out, &data);
    std::string hello(data, static_cast<std::size_t>(n));
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return hello;
}

TEST(EgressSniff, ServerNameOfARealClientHello) {
    const auto hello = client_hello("Files.PyPI.test");
    ASSERT_GT(hello.size(), 100u);
    const auto sni = tls_server_name(hello);
    EXPECT_EQ(sni.status, sniff_status::complete);
    EXPECT_EQ(sni.name, "files.pypi.test");
    for (std::size_t cut = 0; cut < hello.size(); cut += 7)
        EXPECT_EQ(tls_server_name(hello.substr(0, cut)).status, sniff_status::need_more) << cut;
    const auto none = tls_server_name(client_hello(nullptr));
    EXPECT_EQ(none.status, sniff_status::complete);
    EXPECT_EQ(none.name, "");
}

TEST(EgressSniff, AClientHelloSplitAcrossRecords) {
    const auto hello = client_hello("a.example.com");
    const std::string_view body = std::string_view(hello).substr(5);
    std::string split;
    for (std::size_t at = 0; at < body.size(); at += 100) {
        const auto piece = body.substr(at, 100);
        split += std::string{'\x16', '\x03', '\x01', static_cast<char>(piece.size() >> 8), static_cast<char>(piece.size() & 0xff)};
        split += piece;
    }
    EXPECT_EQ(tls_server_name(split).name, "a.example.com");
}

TEST(EgressSniff, MangledHellosAreMalformed) {
    EXPECT_EQ(tls_server_name("GET / HTTP/1.1\r\n\r\n").status, sniff_status::malformed);
    auto hello = client_hello("a.example.com");
    hello[5] = 2;  // not a ClientHello
    EXPECT_EQ(tls_server_name(hello).status, sniff_status::malformed);
    EXPECT_EQ(tls_server_name(std::string("\x16\x03\x01\x00\x00", 5)).status, sniff_status::malformed);
}

TEST(EgressSniff, ProxyRequestHeads) {
    auto r = parse_proxy_request("CONNECT PyPI.test:443 HTTP/1.1\r\nHost: pypi.test:443\r\n\r\nextra");
    EXPECT_EQ(r.status, sniff_status::complete);
    EXPECT_EQ(r.method, "CONNECT");
    EXPECT_EQ(r.host, "pypi.test");
    EXPECT_EQ(r.port, 443);
    EXPECT_EQ(r.head_bytes, std::string("CONNECT PyPI.test:443 HTTP/1.1\r\nHost: pypi.test:443\r\n\r\n").size());

    r = parse_proxy_request("GET http://api.example.com:8080/v1/x?y=1 HTTP/1.1\r\nHost: api.example.com:8080\r\nAccept: */*\r\n\r\n");
    EXPECT_EQ(r.status, sniff_status::complete);
    EXPECT_EQ(r.host, "api.example.com");
    EXPECT_EQ(r.port, 8080);
    EXPECT_EQ(r.target, "/v1/x?y=1");
    r = parse_proxy_request("GET http://example.com HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.port, 80);
    EXPECT_EQ(r.target, "/");
    r = parse_proxy_request("CONNECT [fd00::1]:443 HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.host, "fd00::1");

    EXPECT_EQ(parse_proxy_request("CONNECT a.com:443 HTTP/1.1\r\n").status, sniff_status::need_more);
    for (const char* bad : {"GET /relative HTTP/1.1\r\n\r\n", "CONNECT a.com HTTP/1.1\r\n\r\n",
                            "GET http://a.com/ HTTP/1.1\r\nHost: b.com\r\n\r\n",
                            "GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\nHost: a.com\r\n\r\n",
                            "GET http://user:pw@a.com/ HTTP/1.1\r\n\r\n", "CONNECT a.com:99999 HTTP/1.1\r\n\r\n",
                            "BREW a.com\r\n\r\n", "GET http://`.example.com/ HTTP/1.1\r\n\r\n",
                            "CONNECT a_b c.com:443 HTTP/1.1\r\n\r\n", "G(T http://a.com/ HTTP/1.1\r\n\r\n"}) {
        const auto b = parse_proxy_request(bad);
        EXPECT_EQ(b.status, sniff_status::malformed) << bad;
        EXPECT_FALSE(b.error.empty()) << bad;
    }
    EXPECT_EQ(parse_proxy_request(std::string(20000, 'a'), 16384).status, sniff_status::malformed);
    EXPECT_EQ(parse_proxy_request(std::string("GET http://a.com/ HTTP/1.1\r\nX: a\0b\r\n\r\n", 38)).status, sniff_status::malformed);
    EXPECT_EQ(parse_proxy_request("GET http://a.com/ HTTP/1.1\r\nX: a\nb\r\n\r\n").status, sniff_status::malformed);
}

// Review turn 3, L3: heads are read as strictly as RFC 9112 asks.
TEST(EgressSniff, L3StrictHeadsRefuseAmbiguousFields) {
    const std::string line = "GET http://a.com/ HTTP/1.1\r\n";
    for (const char* bad : {"Host : a.com\r\n", "Host\t: a.com\r\n", "Transfer-Encoding : chunked\r\n",
                            "Content-Length: 1\r\nContent-Length: 1\r\n", "Content-Length: 1\r\nContent-Length: 2\r\n",
                            "Content-Length: 1, 2\r\n", "Content-Length: -1\r\n", "Content-Length: \r\n",
                            "X-A: 1\r\n folded\r\n", "X-A: 1\r\n\tfolded\r\n", "no colon here\r\n",
                            ": empty name\r\n", "X A: 1\r\n"}) {
        const auto r = parse_proxy_request(line + bad + "\r\n");
        EXPECT_EQ(r.status, sniff_status::malformed) << bad;
        EXPECT_FALSE(r.error.empty()) << bad;
        // The same inside a tunnel the proxy terminated.
        EXPECT_EQ(parse_origin_request(std::string("GET / HTTP/1.1\r\nHost: a.com\r\n") + bad + "\r\n", 443).status,
                  sniff_status::malformed)
            << bad;
    }
    // "Host :" is an error, not a field of another name beside a real Host.
    EXPECT_EQ(parse_origin_request("GET / HTTP/1.1\r\nHost: a.com\r\nHost : b.com\r\n\r\n", 443).status,
              sniff_status::malformed);
    // What stays fine: one Content-Length, spaces around a value, any case.
    EXPECT_EQ(parse_proxy_request(line + "content-length:  12 \r\nX-B:\r\n\r\n").status, sniff_status::complete);
    EXPECT_EQ(parse_proxy_request(line + "HOST: a.com\r\n\r\n").status, sniff_status::complete);
}

TEST(EgressSniff, OriginRequestsInsideATerminatedTunnel) {
    auto r = parse_origin_request("POST /v1/chat?x=1 HTTP/1.1\r\nHost: API.example.com\r\nContent-Length: 2\r\n\r\n{}", 443);
    EXPECT_EQ(r.status, sniff_status::complete);
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.host, "api.example.com");
    EXPECT_EQ(r.port, 443) << "no port in Host: the tunnel's";
    EXPECT_EQ(r.target, "/v1/chat?x=1");
    r = parse_origin_request("GET / HTTP/1.1\r\nHost: api.example.com:8443\r\n\r\n", 8443);
    EXPECT_EQ(r.port, 8443);
    EXPECT_EQ(parse_origin_request("GET / HTTP/1.1\r\nHost: a.com\r\n", 443).status, sniff_status::need_more);
    for (const char* bad : {"GET / HTTP/1.1\r\n\r\n", "GET http://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n",
                            "GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n",
                            "GET / HTTP/1.1\r\nHost: user@a.com\r\n\r\n", "GET / HTTP/1.1\r\nHost: `.a.com\r\n\r\n",
                            "OPTIONS * HTTP/1.1\r\nHost: a.com\r\n\r\n"}) {
        const auto b = parse_origin_request(bad, 443);
        EXPECT_EQ(b.status, sniff_status::malformed) << bad;
        EXPECT_FALSE(b.error.empty()) << bad;
    }
}

}  // namespace
}  // namespace cellgate::egress
