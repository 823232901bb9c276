// The proxy's options and construction: --egress-resolve entries parsed,
// the ports never dialled, and the small wire helpers its parts share (the
// clock, the refusal response, a request head's header lines). The proxy's
// other state lives in the files proxy_internal.hpp names.

#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include "egress/proxy.hpp"

#include "egress/proxy_internal.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>

namespace cellgate::egress {

std::int64_t unix_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

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

proxy::proxy(asio::io_context& ioc, proxy_options options) : impl_(std::make_shared<impl>(ioc, std::move(options))) {}

proxy::~proxy() { stop(); }

void proxy::forbid_port(std::uint16_t port) {
    std::lock_guard lock(impl_->mutex);
    impl_->opt.forbidden_ports.push_back(port);
}

}  // namespace cellgate::egress
