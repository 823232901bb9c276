#include "egress/policy.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace cellgate::egress {

namespace {

constexpr std::size_t max_rules = 256;

std::optional<std::uint16_t> parse_port(std::string_view text) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v == 0 || v > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(v);
}

[[noreturn]] void bad(std::string_view text, const std::string& why) {
    throw std::invalid_argument("network rule '" + std::string(text.substr(0, 100)) + "': " + why);
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

bool in(const address& a, std::string_view net, unsigned v4_prefix_or_v6) {
    const auto base = address::parse(net);
    cidr c{*base, base->v4 ? 96 + v4_prefix_or_v6 : v4_prefix_or_v6};
    return c.contains(a);
}

}  // namespace

std::optional<address> address::parse(std::string_view text) {
    std::string s(text);
    address a;
    in_addr v4{};
    if (::inet_pton(AF_INET, s.c_str(), &v4) == 1) {
        a.v4 = true;
        a.bytes[10] = a.bytes[11] = 0xff;
        std::copy_n(reinterpret_cast<const std::uint8_t*>(&v4.s_addr), 4, a.bytes.begin() + 12);
        return a;
    }
    in6_addr v6{};
    if (::inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
        std::copy_n(v6.s6_addr, 16, a.bytes.begin());
        // An IPv4-mapped IPv6 address is that IPv4 address.
        a.v4 = std::all_of(a.bytes.begin(), a.bytes.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
               a.bytes[10] == 0xff && a.bytes[11] == 0xff;
        return a;
    }
    return std::nullopt;
}

std::string address::to_string() const {
    char out[INET6_ADDRSTRLEN] = {};
    if (v4) ::inet_ntop(AF_INET, bytes.data() + 12, out, sizeof out);
    else ::inet_ntop(AF_INET6, bytes.data(), out, sizeof out);
    return out;
}

bool cidr::contains(const address& a) const noexcept {
    if (base.v4 != a.v4) return false;
    unsigned bits = prefix;
    for (std::size_t i = 0; i < 16 && bits > 0; ++i, bits = bits >= 8 ? bits - 8 : 0) {
        const auto mask = static_cast<std::uint8_t>(bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff);
        if ((a.bytes[i] & mask) != (base.bytes[i] & mask)) return false;
    }
    return true;
}

std::optional<std::string> normalize_host(std::string_view host) {
    std::string h(host);
    std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!h.empty() && h.back() == '.') h.pop_back();
    if (h.empty() || h.size() > 253) return std::nullopt;
    std::size_t label = 0;
    for (std::size_t i = 0; i <= h.size(); ++i) {
        if (i == h.size() || h[i] == '.') {
            if (label == 0 || label > 63) return std::nullopt;
            if (h[i - 1] == '-' || h[i - label] == '-') return std::nullopt;
            label = 0;
            continue;
        }
        if (!is_name_char(h[i])) return std::nullopt;
        ++label;
    }
    return h;
}

rule parse_rule(std::string_view text) {
    rule r;
    r.text = std::string(text);
    if (text.empty() || text.size() > 300) bad(text, "must be 1 to 300 characters");
    std::string_view target = text;
    // A port: "host:443", "1.2.3.0/24:443", "[v6/64]:443".
    if (target.front() == '[') {
        const auto close = target.find(']');
        if (close == std::string_view::npos) bad(text, "an IPv6 entry in [ ] needs its ']'");
        const auto rest = target.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':') bad(text, "only ':<port>' may follow ']'");
            const auto p = parse_port(rest.substr(1));
            if (!p) bad(text, "the port must be 1 to 65535");
            r.port = *p;
        }
        target = target.substr(1, close - 1);
    } else if (const auto colon = target.rfind(':'); colon != std::string_view::npos && target.find(':') == colon) {
        const auto p = parse_port(target.substr(colon + 1));
        if (!p) bad(text, "the port must be 1 to 65535");
        r.port = *p;
        target = target.substr(0, colon);
    }
    // A network or an address.
    const auto slash = target.find('/');
    const auto addr_text = target.substr(0, slash);
    if (const auto a = address::parse(addr_text)) {
        unsigned prefix = a->v4 ? 32 : 128;
        if (slash != std::string_view::npos) {
            const auto p = target.substr(slash + 1);
            const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), prefix);
            if (ec != std::errc() || end != p.data() + p.size() || prefix > (a->v4 ? 32u : 128u))
                bad(text, std::string("the prefix must be 0 to ") + (a->v4 ? "32" : "128"));
        }
        r.what = rule::kind::network;
        r.net = {*a, a->v4 ? 96 + prefix : prefix};
        return r;
    }
    if (slash != std::string_view::npos) bad(text, "not an address before '/'");
    if (target.starts_with("*.")) {
        const auto suffix = normalize_host(target.substr(2));
        if (!suffix || suffix->find('.') == std::string::npos)
            bad(text, "a wildcard needs a name with a dot after '*.' (as *.example.com)");
        r.what = rule::kind::wildcard;
        r.name = *suffix;
        return r;
    }
    const auto name = normalize_host(target);
    if (!name) bad(text, "not a host name, address or network");
    r.what = rule::kind::host;
    r.name = *name;
    return r;
}

bool rule::matches(std::string_view host, const std::optional<address>& addr, std::uint16_t p) const {
    if (what == kind::network) return addr && net.contains(*addr) && (port == 0 || port == p);
    if (port == 0 ? (p != 80 && p != 443) : p != port) return false;
    if (host.empty()) return false;
    if (what == kind::host) return host == name;
    return host.size() > name.size() + 1 && host.ends_with(name) && host[host.size() - name.size() - 1] == '.';
}

policy policy::parse(const std::vector<std::string>& allow, const std::vector<std::string>& deny) {
    if (allow.size() > max_rules || deny.size() > max_rules)
        throw std::invalid_argument("at most " + std::to_string(max_rules) + " allow and " + std::to_string(max_rules) +
                                    " deny entries");
    policy p;
    for (const auto& a : allow) p.allow.push_back(parse_rule(a));
    for (const auto& d : deny) p.deny.push_back(parse_rule(d));
    return p;
}

policy::verdict policy::check(std::string_view host, const std::optional<address>& addr, std::uint16_t port) const {
    // A target that is neither a valid name nor an address matches no name
    // rule (only network rules, by its address): a malformed name can never
    // ride on a wildcard.
    auto name = normalize_host(host);
    if (!name && address::parse(host)) name = std::string(host);
    if (!name) name = std::string();
    for (const auto& r : deny)
        if (r.matches(*name, addr, port)) return {false, r.text};
    for (const auto& r : allow)
        if (r.matches(*name, addr, port)) return {true, r.text};
    return {false, ""};
}

bool policy::may_allow_by_address(std::uint16_t port) const {
    return std::any_of(allow.begin(), allow.end(),
                       [&](const rule& r) { return r.what == rule::kind::network && (r.port == 0 || r.port == port); });
}

name_verdict judge_name(const std::vector<policy>& layers, std::string_view host, std::uint16_t port) {
    if (layers.empty()) return {false, "not allowed by the session's network policy"};
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto v = layers[i].check(host, std::nullopt, port);
        if (v.allowed) continue;
        const std::string whose = i == 0 ? "" : " (tenant)";
        // A deny entry that names it: no address can save it.
        if (!v.rule.empty()) return {false, "denied by " + v.rule + whose};
        if (!layers[i].may_allow_by_address(port))
            return {false, i == 0 ? "not allowed by the session's network policy"
                                  : "not allowed by the session's network policy (beyond the tenant's maximum)"};
    }
    return {true, ""};
}

std::optional<address> embedded_ipv4(const address& a) noexcept {
    if (a.v4) return std::nullopt;
    const auto& b = a.bytes;
    auto v4 = [](const std::uint8_t* p) {
        address out;
        out.v4 = true;
        out.bytes[10] = out.bytes[11] = 0xff;
        std::copy_n(p, 4, out.bytes.begin() + 12);
        return out;
    };
    auto zeros = [&](std::size_t from, std::size_t to) {
        return std::all_of(b.begin() + from, b.begin() + to, [](std::uint8_t x) { return x == 0; });
    };
    // ::a.b.c.d (IPv4-compatible; "::" and "::1" are themselves, below).
    if (zeros(0, 12) && !zeros(12, 15)) return v4(b.data() + 12);
    // ::ffff:0:a.b.c.d (SIIT, RFC 6052's predecessor RFC 2765).
    if (zeros(0, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) return v4(b.data() + 12);
    // 64:ff9b::a.b.c.d (well-known NAT64 prefix).
    if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zeros(4, 12)) return v4(b.data() + 12);
    // (64:ff9b:1::/48, local-use NAT64, puts it where its operator chose:
    // is_internal takes the whole /48 as internal.)
    // 2002:a.b.c.d::/48 (6to4).
    if (b[0] == 0x20 && b[1] == 0x02) return v4(b.data() + 2);
    return std::nullopt;
}

bool is_internal(const address& a) noexcept {
    if (const auto inner = embedded_ipv4(a); inner && is_internal(*inner)) return true;
    if (a.v4) {
        for (const auto& [net, prefix] : std::initializer_list<std::pair<std::string_view, unsigned>>{
                 {"0.0.0.0", 8}, {"10.0.0.0", 8}, {"100.64.0.0", 10}, {"127.0.0.0", 8}, {"169.254.0.0", 16},
                 {"172.16.0.0", 12}, {"192.0.0.0", 24}, {"192.0.2.0", 24}, {"192.168.0.0", 16}, {"198.18.0.0", 15},
                 {"198.51.100.0", 24}, {"203.0.113.0", 24}, {"224.0.0.0", 4}, {"240.0.0.0", 4}})
            if (in(a, net, prefix)) return true;
        return false;
    }
    for (const auto& [net, prefix] : std::initializer_list<std::pair<std::string_view, unsigned>>{
             {"::", 128}, {"::1", 128}, {"fc00::", 7}, {"fe80::", 10}, {"ff00::", 8}, {"2001:db8::", 32},
             {"100::", 64}, {"64:ff9b:1::", 48}})
        if (in(a, net, prefix)) return true;
    return false;
}

}  // namespace cellgate::egress
