#include "http/hop.hpp"

#include <boost/beast/websocket/rfc6455.hpp>

#include <array>
#include <cctype>
#include <sstream>

namespace cellgate::http {

namespace {

bool lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// Whether `s` starts with an id of the shape 8-4-4-4-12 (lowercase hex).
bool starts_with_id(std::string_view s) {
    static constexpr std::array<std::size_t, 4> dashes = {8, 13, 18, 23};
    if (s.size() < 36) return false;
    for (std::size_t i = 0; i < 36; ++i) {
        const bool dash = i == dashes[0] || i == dashes[1] || i == dashes[2] || i == dashes[3];
        if (dash ? s[i] != '-' : !lower_hex(s[i])) return false;
    }
    return true;
}

// The id's tag when `s` is exactly an id, or an id then '/'.
std::string tag_of_segment(std::string_view s) {
    if (!starts_with_id(s) || (s.size() > 36 && s[36] != '/')) return {};
    return std::string(s.substr(0, 8));
}

// A cluster node's terminal name, "<tag>-…" (jupyter/terminals_api.cpp): its tag
// when `s`, up to its end, is one.
std::string tag_of_terminal(std::string_view s) {
    if (s.size() < 10 || s[8] != '-' || s.find('/') != std::string_view::npos) return {};
    for (std::size_t i = 0; i < 8; ++i)
        if (!lower_hex(s[i])) return {};
    return std::string(s.substr(0, 8));
}

}  // namespace

std::string node_tag_of_id(std::string_view id) { return id.size() == 36 ? tag_of_segment(id) : std::string(); }

std::string id_tag_of(const boost::beast::http::request_header<>& h, std::string_view raw_path) {
    static constexpr std::array<std::string_view, 8> prefixes = {
        "/api/kernels/", "/api/sessions/", "/api/contents/", "/files/",
        "/v1/sessions/", "/v1/snapshots/", "/e2b/sandboxes/", "/e2b/v2/sandboxes/"};
    for (const auto prefix : prefixes)
        if (raw_path.substr(0, prefix.size()) == prefix) {
            if (auto tag = tag_of_segment(raw_path.substr(prefix.size())); !tag.empty()) return tag;
            break;
        }
    for (const std::string_view prefix : {"/api/terminals/", "/terminals/websocket/"})
        if (raw_path.substr(0, prefix.size()) == prefix) return tag_of_terminal(raw_path.substr(prefix.size()));
    const auto header = h["E2b-Sandbox-Id"];
    if (!header.empty()) {
        const std::string_view id(header.data(), header.size());
        return id.size() == 36 && starts_with_id(id) ? std::string(id.substr(0, 8)) : std::string();
    }
    // <port>-<id>.<domain>
    const auto host_field = h[boost::beast::http::field::host];
    const std::string_view host(host_field.data(), host_field.size());
    std::size_t i = 0;
    while (i < host.size() && std::isdigit(static_cast<unsigned char>(host[i]))) ++i;
    if (i == 0 || i >= host.size() || host[i] != '-') return {};
    const auto rest = host.substr(i + 1);
    if (!starts_with_id(rest) || rest.size() < 37 || rest[36] != '.') return {};
    return std::string(rest.substr(0, 8));
}

std::string hop_request_head(boost::beast::http::request_header<> h, const std::string& remote, const peer_auth& peers,
                             const std::string& to_tag, const identity* who) {
    namespace bhttp = boost::beast::http;
    h.set(hop_header, peers.tag());
    const auto prior = h["X-Forwarded-For"];
    h.set("X-Forwarded-For", prior.empty() ? remote : std::string(prior.data(), prior.size()) + ", " + remote);
    if (!boost::beast::websocket::is_upgrade(h)) h.set(bhttp::field::connection, "close");
    peers.sign(h, to_tag, who);
    std::ostringstream out;
    out << h;
    return out.str();
}

}  // namespace cellgate::http
