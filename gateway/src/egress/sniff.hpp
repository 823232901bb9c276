#pragma once

// What the egress proxy reads from a connection before it decides: the
// server name of a TLS ClientHello (SNI), and the head of a plain HTTP
// proxy request (CONNECT host:port, or an absolute-form GET with its Host).
// Pure and bounded: they look at the bytes given and never allocate more
// than the name.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate::egress {

enum class sniff_status { complete, need_more, malformed };

struct server_name {
    sniff_status status = sniff_status::need_more;
    std::string name;  // empty when the ClientHello carries no SNI
};
// `bytes` are the first bytes the client sent on a TLS connection (records
// of type handshake). need_more until the whole ClientHello is there (at
// most 16 KiB is ever needed).
server_name tls_server_name(std::string_view bytes);

struct proxy_request {
    sniff_status status = sniff_status::need_more;
    std::string method;        // "CONNECT", "GET", …
    std::string host;          // as named (lower case), without brackets
    std::uint16_t port = 0;
    std::string target;        // origin-form path for plain HTTP ("/simple/…")
    std::size_t head_bytes = 0;  // through the blank line
    std::string error;         // why it is malformed
};
// The request head of a client speaking to an HTTP proxy: "CONNECT h:p
// HTTP/1.1" or "GET http://h[:p]/path HTTP/1.1" (whose Host must agree).
// At most `max_head` bytes are looked at.
proxy_request parse_proxy_request(std::string_view bytes, std::size_t max_head = 16384);
// The head of a request inside a TLS tunnel the proxy terminated: "GET
// /path HTTP/1.1" with a Host header, which names host and port (the port
// defaults to `default_port`); target is the origin-form path.
proxy_request parse_origin_request(std::string_view bytes, std::uint16_t default_port, std::size_t max_head = 16384);

}  // namespace cellgate::egress
