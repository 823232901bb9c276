#pragma once

// Egress policy: which (host, port, address) a session's code may reach
// through the egress proxy. Pure: parsing and matching only, so the proxy,
// the API's checks and the unit tests share one definition.
//
//   entry       meaning
//   example.com          that host, ports 80 and 443
//   example.com:8443     that host, that port
//   *.example.com        any name below it (not the apex), ports 80 and 443
//   10.1.2.0/24          addresses in it, any port ("10.1.2.3" is a /32)
//   10.1.2.0/24:5432     addresses in it, that port; IPv6 as [fd00::/8]:443
//
// A connection is allowed when an allow entry matches and no deny entry
// does; policies stack (a session's under its kernelspec's under its
// tenant's maximum): every layer must allow it, so a session can never
// reach what its tenant may not. Names compare in lower case without a
// trailing dot; only ASCII names are taken (IDNs in their xn-- form).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::egress {

// An IPv4 (mapped) or IPv6 address, 16 bytes in network order.
struct address {
    std::array<std::uint8_t, 16> bytes{};
    bool v4 = false;
    static std::optional<address> parse(std::string_view text);
    std::string to_string() const;
    bool operator==(const address&) const = default;
};

struct cidr {
    address base;
    unsigned prefix = 0;  // over the 128 bits (an IPv4 /24 is 96 + 24)
    bool contains(const address& a) const noexcept;
};

struct rule {
    enum class kind { host, wildcard, network } what = kind::host;
    std::string name;  // host or the suffix after "*." (lower case)
    cidr net;
    std::uint16_t port = 0;  // 0: the kind's default (80/443 for names, any for networks)
    std::string text;        // as given, for messages and the audit log
    bool matches(std::string_view host, const std::optional<address>& addr, std::uint16_t port) const;
};

// Throws std::invalid_argument saying what is wrong with `text`.
rule parse_rule(std::string_view text);

class policy {
public:
    std::vector<rule> allow, deny;

    // Each list at most 256 entries; throws std::invalid_argument.
    static policy parse(const std::vector<std::string>& allow, const std::vector<std::string>& deny);

    // The rule that decided, or nothing (allowed: false, no rule matched).
    struct verdict {
        bool allowed = false;
        std::string rule;  // the entry that decided ("" when none matched)
    };
    // `addr` is the address the connection would go to (when the target is
    // an address, or after resolving), so that CIDR rules apply to names too.
    verdict check(std::string_view host, const std::optional<address>& addr, std::uint16_t port) const;
    bool empty() const noexcept { return allow.empty() && deny.empty(); }
    // Whether some allow entry is a network that could take this port (so
    // that a name no entry allows could still be allowed by its address).
    bool may_allow_by_address(std::uint16_t port) const;
};

// Before any lookup of a name: every layer must allow it by name, or (when
// no deny entry names it) hold a network entry for the port that its
// addresses could match. A name outside any layer is never looked up, so a
// session's own CIDR entries cannot send a name past its tenant's maximum
// to the resolver. `refusal` says why when `look_up` is false.
struct name_verdict {
    bool look_up = false;
    std::string refusal;
};
name_verdict judge_name(const std::vector<policy>& layers, std::string_view host, std::uint16_t port);

// Normalizes a host name (lower case, no trailing dot); nullopt if it is not
// a valid ASCII host name (labels of letters, digits, '-' and '_', ≤ 253 bytes).
std::optional<std::string> normalize_host(std::string_view host);

// Loopback, link-local, private (RFC 1918, ULA, CGNAT), unspecified,
// multicast, broadcast, documentation and the IPv4-mapped forms of them:
// addresses a name must not resolve to unless the operator allowed that
// exact network (the DNS-rebinding defence). The IPv6 transition forms
// (IPv4-compatible ::/96, SIIT ::ffff:0:0:0/96, NAT64 64:ff9b::/96 and
// 64:ff9b:1::/48, 6to4 2002::/16) are judged by the IPv4 address they embed
// (a host with sit, 6to4 or a local NAT64 would turn them into it).
bool is_internal(const address& a) noexcept;

// The IPv4 address an IPv6 transition address embeds (see is_internal), or nothing.
std::optional<address> embedded_ipv4(const address& a) noexcept;

}  // namespace cellgate::egress
