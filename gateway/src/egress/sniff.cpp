#include "egress/sniff.hpp"

#include "egress/policy.hpp"

#include <algorithm>
#include <charconv>

namespace cellgate::egress {

namespace {

std::uint32_t be(std::string_view b, std::size_t at, std::size_t n) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    return v;
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

// "host:port", "[v6]:port" or "host" (default_port).
bool split_authority(std::string_view a, std::uint16_t default_port, std::string& host, std::uint16_t& port) {
    std::string_view h = a, p;
    if (a.starts_with('[')) {
        const auto close = a.find(']');
        if (close == std::string_view::npos) return false;
        h = a.substr(1, close - 1);
        const auto rest = a.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':') return false;
            p = rest.substr(1);
        }
        if (!address::parse(h)) return false;
    } else if (const auto colon = a.rfind(':'); colon != std::string_view::npos) {
        h = a.substr(0, colon);
        p = a.substr(colon + 1);
    }
    if (h.empty()) return false;
    // A name the policy could judge, or an address.
    if (!address::parse(h) && !normalize_host(h)) return false;
    unsigned v = default_port;
    if (!p.empty()) {
        const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
        if (ec != std::errc() || end != p.data() + p.size() || v == 0 || v > 65535) return false;
    }
    if (v == 0) return false;
    host = lower(h);
    port = static_cast<std::uint16_t>(v);
    return true;
}

}  // namespace

server_name tls_server_name(std::string_view b) {
    server_name out;
    // Reassemble the handshake messages from the records (a ClientHello may span several).
    std::string hs;
    std::size_t at = 0;
    while (true) {
        if (b.size() < at + 5) return out;  // need_more
        if (static_cast<unsigned char>(b[at]) != 22) return {sniff_status::malformed, {}};
        const auto len = be(b, at + 3, 2);
        if (len == 0 || len > 16384) return {sniff_status::malformed, {}};
        if (b.size() < at + 5 + len) return out;
        hs.append(b.substr(at + 5, len));
        at += 5 + len;
        if (hs.size() >= 4) {
            if (static_cast<unsigned char>(hs[0]) != 1) return {sniff_status::malformed, {}};
            const auto body = be(hs, 1, 3);
            if (body > 16384) return {sniff_status::malformed, {}};
            if (hs.size() >= 4 + body) break;
        }
        if (hs.size() > 16384 + 4) return {sniff_status::malformed, {}};
    }
    const std::string_view m = std::string_view(hs).substr(4, be(hs, 1, 3));
    // version (2), random (32), session id, cipher suites, compression, extensions.
    std::size_t p = 34;
    auto skip = [&](std::size_t len_bytes) {
        if (m.size() < p + len_bytes) return false;
        const auto len = be(m, p, len_bytes);
        p += len_bytes + len;
        return p <= m.size();
    };
    if (!skip(1) || !skip(2) || !skip(1)) return {sniff_status::malformed, {}};
    out.status = sniff_status::complete;
    if (p == m.size()) return out;  // no extensions
    if (m.size() < p + 2) return {sniff_status::malformed, {}};
    const auto ext_end = p + 2 + be(m, p, 2);
    p += 2;
    if (ext_end > m.size()) return {sniff_status::malformed, {}};
    while (p + 4 <= ext_end) {
        const auto type = be(m, p, 2), len = be(m, p + 2, 2);
        p += 4;
        if (p + len > ext_end) return {sniff_status::malformed, {}};
        if (type == 0) {  // server_name: list length, then (type 0, length, name)
            if (len < 5 || static_cast<unsigned char>(m[p + 2]) != 0) return {sniff_status::malformed, {}};
            const auto name_len = be(m, p + 3, 2);
            if (5 + name_len > len) return {sniff_status::malformed, {}};
            out.name = lower(m.substr(p + 5, name_len));
            return out;
        }
        p += len;
    }
    return out;
}

namespace {

// A token (RFC 9110 5.6.2): methods and header names.
constexpr std::string_view token_chars =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~";

// Both forms share the head's checks; `origin_port` 0 means the proxy form.
proxy_request parse_request(std::string_view bytes, std::size_t max_head, std::uint16_t origin_port) {
    proxy_request r;
    auto fail = [&r](std::string why) {
        r.status = sniff_status::malformed;
        r.error = std::move(why);
        return r;
    };
    const auto end = bytes.find("\r\n\r\n");
    if (end == std::string_view::npos) {
        if (bytes.size() > max_head) return fail("the request head is longer than " + std::to_string(max_head) + " bytes");
        return r;
    }
    if (end + 4 > max_head) return fail("the request head is longer than " + std::to_string(max_head) + " bytes");
    r.head_bytes = end + 4;
    const auto head = bytes.substr(0, end);
    // Control bytes other than CR LF (in line ends) and tab: not a request head.
    for (std::size_t i = 0; i < head.size(); ++i) {
        const auto c = static_cast<unsigned char>(head[i]);
        if (c == 0x7f || (c < 0x20 && c != '\t' && !(c == '\r' && i + 1 < head.size() && head[i + 1] == '\n') &&
                          !(c == '\n' && i > 0 && head[i - 1] == '\r')))
            return fail("control bytes in the request head");
    }
    const auto line_end = head.find("\r\n");
    const auto line = head.substr(0, line_end);
    const auto sp1 = line.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0)
        return fail("not an HTTP/1.x request line");
    r.method = std::string(line.substr(0, sp1));
    // A method is a token (RFC 9110): letters, digits and !#$%&'*+-.^_`|~.
    if (r.method.empty() || r.method.find_first_not_of(token_chars) != std::string::npos)
        return fail("the method is not a token");
    const auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    // The header fields, strictly (RFC 9112 5.1, 5.2, 6.3): a name is a token
    // right before its colon (no "Host :", which one server takes for Host
    // and another for something else), no obs-fold (a line continued on the
    // next), and at most one Content-Length, of digits only.
    std::string host_header, content_length;
    std::size_t hosts = 0, lengths = 0;
    for (std::size_t at = line_end; at != std::string_view::npos && at < head.size();) {
        const auto next = head.find("\r\n", at + 2);
        const auto field = head.substr(at + 2, next == std::string_view::npos ? std::string_view::npos : next - at - 2);
        at = next;
        if (field.empty()) continue;
        if (field.front() == ' ' || field.front() == '\t') return fail("a header line continued on the next (obs-fold)");
        const auto colon = field.find(':');
        if (colon == std::string_view::npos) return fail("a header line without ':'");
        const auto name = field.substr(0, colon);
        if (name.empty() || name.find_first_not_of(token_chars) != std::string_view::npos)
            return fail("a header name that is not a token (whitespace before ':'?)");
        auto v = field.substr(colon + 1);
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
        const auto n = lower(name);
        if (n == "host") {
            host_header = lower(v);
            ++hosts;
        } else if (n == "content-length") {
            if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos || v.size() > 18)
                return fail("a bad Content-Length");
            if (lengths++ > 0)
                return fail(std::string(content_length == v ? "a repeated" : "conflicting") + " Content-Length");
            content_length = std::string(v);
        }
    }
    if (hosts > 1) return fail("more than one Host header");
    if (origin_port != 0) {
        // Inside a tunnel the proxy terminated: "GET /path HTTP/1.1" and its Host.
        if (target.empty() || target.front() != '/') return fail("a request inside the tunnel needs an origin-form target");
        if (host_header.empty()) return fail("a request without a Host header");
        if (host_header.find('@') != std::string::npos || !split_authority(host_header, origin_port, r.host, r.port))
            return fail("the Host header is malformed");
        r.target = std::string(target);
        r.status = sniff_status::complete;
        return r;
    }
    if (r.method == "CONNECT") {
        if (!split_authority(target, 0, r.host, r.port)) return fail("CONNECT needs host:port");
        r.status = sniff_status::complete;
        return r;
    }
    if (lower(target.substr(0, 7)) != "http://") return fail("a plain request to the proxy needs an absolute http:// URL");
    const auto rest = target.substr(7);
    const auto slash = rest.find_first_of("/?");
    const auto authority = rest.substr(0, slash);
    if (authority.find('@') != std::string_view::npos) return fail("credentials in the URL are not allowed");
    if (!split_authority(authority, 80, r.host, r.port)) return fail("the URL's host is malformed");
    r.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
    if (r.target.front() == '?') r.target.insert(0, "/");
    if (!host_header.empty()) {
        std::string h;
        std::uint16_t p = 0;
        if (!split_authority(host_header, 80, h, p) || h != r.host || p != r.port)
            return fail("the Host header names another host than the URL");
    }
    r.status = sniff_status::complete;
    return r;
}

}  // namespace

proxy_request parse_proxy_request(std::string_view bytes, std::size_t max_head) {
    return parse_request(bytes, max_head, 0);
}

proxy_request parse_origin_request(std::string_view bytes, std::uint16_t default_port, std::size_t max_head) {
    return parse_request(bytes, max_head, default_port == 0 ? 443 : default_port);
}

}  // namespace cellgate::egress
