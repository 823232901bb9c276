// libFuzzer target: what the egress proxy reads from a sandbox's connection
// before it decides — a TLS ClientHello's server name and an HTTP proxy
// request head — and the policy that judges the result. Beyond "no crash":
// a complete parse names a valid host (the policy's normal form) or none,
// and parsing is a pure function (the same bytes give the same answer).

#include "egress/policy.hpp"
#include "egress/sniff.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

using namespace cellgate::egress;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    static const policy p = policy::parse({"pypi.test", "*.example.com", "10.0.0.0/8:443", "[fd00::/8]"}, {"bad.example.com"});

    const auto sni = tls_server_name(bytes);
    if (sni.status != sniff_status::complete && !sni.name.empty()) __builtin_trap();
    if (sni.status == sniff_status::complete) {
        if (tls_server_name(bytes).name != sni.name) __builtin_trap();
        (void)p.check(sni.name, std::nullopt, 443);
    }

    const auto req = parse_proxy_request(bytes);
    if (req.status == sniff_status::malformed && req.error.empty()) __builtin_trap();
    if (req.status == sniff_status::complete) {
        if (req.host.empty() || req.port == 0 || req.head_bytes > size) __builtin_trap();
        // A complete request names a valid host or an address.
        const auto addr = address::parse(req.host);
        if (!addr && !normalize_host(req.host)) __builtin_trap();
        (void)p.check(req.host, addr, req.port);
        if (addr) (void)is_internal(*addr);
    }
    // Whatever the bytes, a name that is not one is never allowed by name rules.
    if (size < 300 && !normalize_host(bytes) && !address::parse(bytes)) {
        if (p.check(bytes, std::nullopt, 443).allowed) __builtin_trap();
    }
    // The rule parser on the same bytes (the config and API take rules as text).
    try {
        const auto r = parse_rule(bytes.substr(0, 300));
        if (r.text.empty()) __builtin_trap();
    } catch (const std::invalid_argument&) {
    }
    return 0;
}
