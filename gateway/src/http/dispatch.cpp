#include "http/dispatch.hpp"

#include "util/api_error.hpp"

#include <boost/beast/websocket/rfc6455.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace cellgate::http {

namespace {

// Whether a body follows the headers, and its declared length when known.
struct body_info {
    bool present = false;
    std::optional<std::uint64_t> length;
};

body_info body_of(const bhttp::request_header<>& h) {
    body_info b;
    // Any Transfer-Encoding on a request means a body of unknown length
    // (Beast's parser accepts only chunked as the last coding).
    if (!h[bhttp::field::transfer_encoding].empty()) {
        b.present = true;
        return b;
    }
    const auto field = h[bhttp::field::content_length];
    if (field.empty()) return b;
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), n);
    // Beast's parser has already refused a malformed length; be safe anyway.
    if (ec != std::errc() || end != field.data() + field.size()) n = std::numeric_limits<std::uint64_t>::max();
    b.length = n;
    b.present = n > 0;
    return b;
}

// Whether the request's body goes to the route's upload handler.
bool takes_upload(const upload_handler& u, const bhttp::request_header<>& h) {
    if (u.content_types.empty()) return true;
    const auto field = h[bhttp::field::content_type];
    std::string type(field.data(), field.size());
    type = type.substr(0, type.find(';'));
    while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
    for (auto& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return std::find(u.content_types.begin(), u.content_types.end(), type) != u.content_types.end();
}

// A guarded route's caller, when its request names a tenant by a token this
// node knows (E2B's X-API-Key, with or without "e2b_", or Authorization):
// the hop vouches for it instead of passing the token on. Otherwise none,
// and the owner's guard sees what is left (per-sandbox tokens).
std::optional<identity> tenant_of_guarded(const authenticator& auth, const request_context& ctx) {
    const auto key = header_value(ctx.req, "x-api-key");
    if (!key.empty()) {
        auto r = auth.check_token(key);
        if (r.status != authenticator::outcome::ok && key.starts_with("e2b_"))
            r = auth.check_token(std::string_view(key).substr(4));
        if (r.status == authenticator::outcome::ok) return r.who;
    }
    const auto r = auth.check(ctx.req, ctx.query);
    if (r.status == authenticator::outcome::ok) return r.who;
    return std::nullopt;
}

admission respond(admission a, response r, const body_info& body) {
    a.what = admission::action::respond;
    a.reply = std::move(r);
    a.close_after = body.present;
    return a;
}

}  // namespace

bool public_route(const std::string& pattern) {
    return pattern == "/api" || pattern == "/healthz" || pattern == "/" || pattern.rfind("/static/", 0) == 0 ||
           pattern == "/static-config.json";
}

response body_too_large(std::size_t limit) {
    return error_response(413, "The request body is larger than " + std::to_string(limit) + " bytes");
}

// Whom a failed authentication is charged to: the address, or behind a
// trusted proxy the client its X-Forwarded-For names last.
std::string throttle_key(const dispatch_rules& rules, const bhttp::request_header<>& h, const std::string& remote) {
    const auto& trusted = rules.options.trusted_proxies;
    if (std::find(trusted.begin(), trusted.end(), remote) == trusted.end()) return remote;
    const auto it = h.find("X-Forwarded-For");
    if (it == h.end()) return remote;
    auto v = std::string_view(it->value().data(), it->value().size());
    if (const auto comma = v.rfind(','); comma != std::string_view::npos) v.remove_prefix(comma + 1);
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
    return v.empty() || v.size() > 64 ? remote : std::string(v);
}

admission admit(const dispatch_rules& rules, const bhttp::request_header<>& h, const std::string& remote) {
    admission a;
    a.ctx = std::make_shared<request_context>();
    auto& ctx = *a.ctx;
    ctx.req = request(h);
    ctx.remote = remote;
    const auto target = std::string_view(h.target().data(), h.target().size());
    const auto q = target.find('?');
    const auto raw_path = target.substr(0, q);
    if (q != std::string_view::npos) ctx.query = parse_query(target.substr(q + 1));
    const auto body = body_of(h);

    if (h.method() == bhttp::verb::options) {
        ctx.route = "(preflight)";
        return respond(std::move(a), empty_response(204), body);
    }
    const auto m = rules.routes.find(h.method(), raw_path);
    ctx.route = m.pattern.empty() ? "(unmatched)" : m.pattern;
    if (m.handler == nullptr && m.upload == nullptr) {
        if (m.status == 400) return respond(std::move(a), error_response(400, "The request path has a malformed %-escape"), body);
        if (m.status == 405) {
            auto r = error_response(405, "Method not allowed here");
            r.headers.emplace_back("Allow", m.allow);
            return respond(std::move(a), std::move(r), body);
        }
        return respond(std::move(a), error_response(404, "Not found: " + std::string(raw_path.substr(0, 200))), body);
    }
    ctx.params = m.params;
    ctx.path = std::string(raw_path);

    const bool is_public = public_route(m.pattern) && m.upload == nullptr;
    // An address that keeps failing to authenticate waits before any token
    // of its is looked at again.
    const auto client = throttle_key(rules, h, remote);
    if (!is_public && rules.throttle != nullptr)
        if (const auto wait = rules.throttle->refused_for(client); wait > 0) {
            auto r = error_response(429, "Too many failed authentications from this address; try again in " +
                                             std::to_string(wait) + " s");
            r.headers.emplace_back("Retry-After", std::to_string(wait));
            return respond(std::move(a), std::move(r), body);
        }
    auto refuse_auth = [&](response r) {
        if (rules.throttle != nullptr) rules.throttle->failed(client);
        return respond(std::move(a), std::move(r), body);
    };
    // On a cluster node, the cluster's headers are believed only from a peer
    // that signed them (review turn 3, H4); its word for a tenant stands for
    // the tenant's token, which it does not send.
    if (rules.hops != nullptr && rules.hops->peers) {
        auto v = rules.hops->peers->check(h, rules.auth);
        if (v.what == peer_auth::verdict::kind::refused)
            return respond(std::move(a), error_response(403, "Not a request of this cluster's nodes: " + v.why), body);
        if (v.who) {
            ctx.who = std::move(*v.who);
            ctx.vouched = true;
        }
    }
    // A token route's token is checked before anything else; a guarded
    // route's credentials (the E2B sandbox plane's) only the id's owner knows.
    if (m.guard == nullptr && !is_public && !ctx.vouched) {
        const auto who = rules.auth.check(ctx.req, ctx.query);
        if (who.status == authenticator::outcome::missing)
            return refuse_auth(error_response(401, "Authentication required: send 'Authorization: token <token>'"));
        if (who.status == authenticator::outcome::wrong) return refuse_auth(error_response(403, "Invalid token"));
        ctx.who = who.who;
    }
    if (rules.hops != nullptr && rules.hops->locate && h.find(hop_header) == h.end()) {
        if (const auto tag = id_tag_of(h, raw_path); !tag.empty() && tag != rules.hops->tag) {
            auto owner = rules.hops->locate(tag);
            if (owner.what == hop_owner::kind::peer) {
                a.what = admission::action::forward;
                a.forward_to = std::move(owner.address);
                a.forward_tag = tag;
                if (m.guard == nullptr && !is_public) a.forward_who = ctx.who;
                else if (m.guard != nullptr) a.forward_who = tenant_of_guarded(rules.auth, ctx);
                return a;
            }
            if (owner.what == hop_owner::kind::gone)
                return respond(std::move(a),
                               error_response(410, "The node that held this id (" + tag +
                                                       ") has left the cluster (its lease expired); what ran there is gone"),
                               body);
        }
    }
    if (m.guard != nullptr)
        if (auto refusal = (*m.guard)(ctx, rules.auth)) {
            if (refusal->status == 401 || refusal->status == 403) return refuse_auth(std::move(*refusal));
            return respond(std::move(a), std::move(*refusal), body);
        }

    if (boost::beast::websocket::is_upgrade(h)) {
        if (m.socket != nullptr) {
            a.what = admission::action::socket;
            a.socket = m.socket;
            return a;
        }
        if (m.pattern != channels_pattern) return respond(std::move(a), error_response(400, "No WebSocket endpoint here"), body);
        a.what = admission::action::upgrade;
        return a;
    }
    if (m.upload != nullptr && (takes_upload(*m.upload, h) || !*m.handler)) {
        a.what = admission::action::upload;
        a.upload = m.upload;
        return a;
    }
    a.body_limit = is_public ? rules.options.max_public_body_bytes : rules.options.max_body_bytes;
    // A declared length is checked now; a chunked body is held to the same
    // limit while it is read.
    if (body.length && *body.length > a.body_limit) return respond(std::move(a), body_too_large(a.body_limit), body);
    a.what = admission::action::read_body;
    a.handler = m.handler;
    return a;
}

void dispatch(const admission& a, reply_fn reply) {
    const auto& ctx = a.ctx;
    // Called at most once, whether the handler replies or throws first.
    auto once = std::make_shared<std::atomic<bool>>(false);
    reply_fn guarded = [once, reply](response r) {
        if (!once->exchange(true)) reply(std::move(r));
    };
    const auto method = std::string(bhttp::to_string(ctx->req.method()));
    try {
        (*a.handler)(ctx, guarded);
    } catch (const api_exception& e) {
        guarded(error_response(e.status(), e.what()));
    } catch (const nlohmann::json::exception& e) {
        // Reading a request body's field as the wrong type.
        spdlog::info("{} {}: {}", method, ctx->route, e.what());
        guarded(error_response(400, "A field in the request body has the wrong type"));
    } catch (const std::exception& e) {
        spdlog::error("{} {}: handler failed: {}", method, ctx->route, e.what());
        guarded(error_response(500, "Internal error"));
    }
}

}  // namespace cellgate::http
