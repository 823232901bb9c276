#include "e2b/surface.hpp"

#include "http/auth.hpp"
#include "util/api_error.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <charconv>

namespace cellgate::e2b {

using namespace http;
using nlohmann::json;

namespace {

std::string header(const request_context& ctx, std::string_view name) { return header_value(ctx.req, name); }

// The gateway's own error body ({"reason","message"}) → the message alone.
std::string message_of(const response& r) {
    const auto body = json::parse(r.body, nullptr, false);
    if (body.is_object() && body.contains("message") && body["message"].is_string()) return body["message"];
    return r.body.substr(0, 500);
}

// An error in the gateway's own shape, not yet in the SDK's ({"code": …}).
bool is_gateway_error(const response& r) {
    if (r.status < 400 || r.stream || r.file_fd >= 0 || r.content_type != "application/json") return false;
    const auto body = json::parse(r.body, nullptr, false);
    return !(body.is_object() && body.contains("code"));
}

// "<port>-<id>.<domain>[:p]" → (port, id), when the Host is one of ours.
std::optional<std::pair<unsigned, std::string>> from_host(std::string_view host, std::string_view domain) {
    if (domain.empty()) return std::nullopt;
    if (const auto colon = host.rfind(':'); colon != std::string_view::npos) host = host.substr(0, colon);
    if (host.size() <= domain.size() + 1 || !host.ends_with(domain) || host[host.size() - domain.size() - 1] != '.')
        return std::nullopt;
    const auto label = host.substr(0, host.size() - domain.size() - 1);
    const auto dash = label.find('-');  // the id holds dashes: split at the first one
    if (dash == std::string_view::npos) return std::nullopt;
    unsigned port = 0;
    const auto [end, ec] = std::from_chars(label.data(), label.data() + dash, port);
    if (ec != std::errc() || end != label.data() + dash) return std::nullopt;
    return std::pair{port, std::string(label.substr(dash + 1))};
}

template <class Shape>
handler_fn shaped(handler_fn h, Shape shape) {
    return [h = std::move(h), shape](const request_ptr& req, reply_fn reply) {
        reply_fn out = [reply, shape](response r) {
            if (is_gateway_error(r)) {
                auto shaped_r = shape(r.status, message_of(r));
                for (auto& kv : r.headers) shaped_r.headers.push_back(std::move(kv));  // Retry-After, Allow
                return reply(std::move(shaped_r));
            }
            reply(std::move(r));
        };
        try {
            h(req, out);
        } catch (const api_exception& e) {
            out(shape(e.status(), e.what()));
        } catch (const contents::contents_error& e) {
            try {
                rethrow_contents(e);
            } catch (const api_exception& a) {
                out(shape(a.status(), a.what()));
            }
        } catch (const json::exception& e) {
            spdlog::info("e2b {}: {}", req->route, e.what());
            out(shape(400, "A field in the request body has the wrong type"));
        } catch (const std::exception& e) {
            spdlog::error("e2b {}: handler failed: {}", req->route, e.what());
            out(shape(500, "Internal error"));
        }
    };
}

}  // namespace

response rest_error(unsigned status, const std::string& message) {
    return json_response(status, {{"code", status}, {"message", message}});
}

std::string_view connect_code_for(unsigned status) noexcept {
    switch (status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: return "not_found";
    case 409: return "already_exists";
    case 413: return "resource_exhausted";
    case 429: return "resource_exhausted";
    case 501: return "unimplemented";
    case 503: return "unavailable";
    case 504: return "deadline_exceeded";
    case 507: return "resource_exhausted";
    default: return status >= 500 ? "internal" : "unknown";
    }
}

unsigned status_for_connect_code(std::string_view code) noexcept {
    if (code == "invalid_argument" || code == "failed_precondition" || code == "out_of_range") return 400;
    if (code == "unauthenticated") return 401;
    if (code == "permission_denied") return 403;
    if (code == "not_found") return 404;
    if (code == "already_exists" || code == "aborted") return 409;
    if (code == "resource_exhausted") return 429;
    if (code == "unimplemented") return 501;
    if (code == "unavailable") return 503;
    if (code == "deadline_exceeded") return 504;
    return 500;
}

response connect_error(std::string_view code, const std::string& message) {
    return json_response(status_for_connect_code(code), {{"code", code}, {"message", message}});
}

handler_fn rest_handler(handler_fn h) { return shaped(std::move(h), rest_error); }
handler_fn connect_handler(handler_fn h) {
    return shaped(std::move(h), [](unsigned status, const std::string& m) {
        auto r = connect_error(connect_code_for(status), m);
        r.status = status;  // keep what the core said (413 stays 413)
        return r;
    });
}

std::optional<response> control_guard(request_context& ctx, const authenticator& auth) {
    if (ctx.vouched) return std::nullopt;  // a cluster peer checked the caller's key (http/peer_auth.hpp)
    auto key = header(ctx, "X-API-KEY");
    authenticator::result who;
    if (!key.empty()) {
        who = auth.check_token(key);
        // The Python SDK insists on "e2b_<hex>": a cellgate token may be given so.
        if (who.status != authenticator::outcome::ok && key.starts_with("e2b_"))
            who = auth.check_token(std::string_view(key).substr(4));
    } else {
        who = auth.check(ctx.req, {});
    }
    if (who.status == authenticator::outcome::ok) {
        ctx.who = who.who;
        return std::nullopt;
    }
    // The SDKs map only 401 to AuthenticationError.
    return rest_error(401, who.status == authenticator::outcome::missing
                               ? "Authentication required: send a cellgate token as X-API-KEY (E2B_API_KEY)"
                               : "Invalid API key");
}

route_guard sandbox_guard(surface& e, unsigned port, bool connect_errors) {
    return [&e, port, connect_errors](request_context& ctx, const authenticator&) -> std::optional<response> {
        auto refuse = [connect_errors](unsigned status, const std::string& m) {
            return connect_errors ? connect_error(connect_code_for(status), m) : rest_error(status, m);
        };
        std::string id = header(ctx, "E2b-Sandbox-Id");
        std::string port_text = header(ctx, "E2b-Sandbox-Port");
        unsigned asked = 0;
        if (id.empty()) {
            if (const auto h = from_host(header(ctx, "Host"), e.options.domain)) {
                asked = h->first;
                id = h->second;
            }
        } else {
            const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), asked);
            if (ec != std::errc() || end != port_text.data() + port_text.size()) asked = 0;
        }
        if (id.empty()) return refuse(400, "No sandbox named: send E2b-Sandbox-Id and E2b-Sandbox-Port (E2B_SANDBOX_URL)");
        if (asked != envd_port && asked != interpreter_port)
            return refuse(502, "Port " + port_text.substr(0, 10) + " is not open in a cellgate sandbox (49983 envd, 49999 code interpreter)");
        if (port != 0 && asked != port) return refuse(404, "No such endpoint on port " + std::to_string(asked));
        const auto record = e.book.find(id);
        const auto access = header(ctx, "X-Access-Token");
        const auto traffic = header(ctx, "E2B-Traffic-Access-Token");
        if (access.empty() && traffic.empty())
            return refuse(401, "An access token is required (the sandbox's envdAccessToken or trafficAccessToken)");
        // Both are compared whatever the outcome, so the time says nothing.
        const auto& want_access = record ? record->envd_token : std::string("-");
        const auto& want_traffic = record ? record->traffic_token : std::string("-");
        const bool access_ok = token_matches(access, want_access);
        const bool traffic_ok = token_matches(traffic, want_traffic);
        const bool ok = asked == envd_port ? access_ok : (traffic_ok || access_ok);
        if (!record) return refuse(404, "No such sandbox: " + id.substr(0, 64));
        if (!ok) return refuse(401, "Wrong access token for this sandbox");
        ctx.who.tenant = record->tenant;
        ctx.who.token_name = "e2b-sandbox";
        ctx.params["sandbox"] = id;
        ctx.params["port"] = std::to_string(asked);
        return std::nullopt;
    };
}

std::string workspace_path(std::string_view p) {
    std::string_view rest;
    auto under = [&p, &rest](std::string_view root) {
        if (p == root) {
            rest = {};
            return true;
        }
        if (p.size() > root.size() && p.starts_with(root) && p[root.size()] == '/') {
            rest = p.substr(root.size() + 1);
            return true;
        }
        return false;
    };
    if (p.empty() || p == "." || p == "~") rest = {};
    else if (p.front() != '/') rest = p.starts_with("~/") ? p.substr(2) : p;
    else if (!under(home_dir) && !under("/workspace"))
        throw api_exception(404, "A cellgate sandbox shows E2B code its workspace only: " + std::string(home_dir) +
                                     " (and paths relative to it); '" + std::string(p.substr(0, 200)) + "' is outside");
    while (rest.starts_with("./")) rest.remove_prefix(2);
    while (rest.size() > 1 && rest.back() == '/') rest.remove_suffix(1);
    if (rest == "/" || rest == ".") rest = {};
    try {
        return contents::contents_store::check_path(rest);
    } catch (const contents::contents_error& e) {
        throw api_exception(400, e.what());
    }
}

std::string e2b_path(std::string_view rel) {
    return rel.empty() ? std::string(home_dir) : std::string(home_dir) + "/" + std::string(rel);
}

kernels::kernel_ptr sandbox_kernel(surface& e, const request_ptr& req) {
    auto k = e.services.kernels.find(req->who.tenant, req->param("sandbox"));
    if (!k) throw api_exception(404, "The sandbox has ended: " + req->param("sandbox").substr(0, 64));
    return k;
}

std::unique_ptr<contents::contents_store> sandbox_store(const kernels::kernel_ptr& k) {
    return core::open_files(k, 503);
}

void rethrow_contents(const contents::contents_error& e) { throw api_exception(kit::contents_status(e.kind()), e.what()); }

std::shared_ptr<void> register_e2b_api(router& r, kit::services& s, agent::agent_service& agents,
                                       processes::process_table& processes, sandbox_book& book,
                                       const e2b_options& options) {
    auto e = std::make_shared<surface>(surface{s, agents, *s.cells, book, &processes, options, std::make_shared<code_contexts>(processes),
                                               std::make_shared<watch_book>(watch_limits{.per_tenant = options.max_watches_per_tenant})});
    s.metrics.add_gauge_source([watches = std::weak_ptr(e->watches)](std::string& out) {
        if (auto w = watches.lock()) w->render(out);
    });
    s.kernels.on_removed([contexts = std::weak_ptr(e->contexts), watches = std::weak_ptr(e->watches)](const std::string& kernel_id) {
        if (auto c = contexts.lock()) c->remove_session(kernel_id);
        if (auto w = watches.lock()) w->remove_session(kernel_id);
    });
    // Template builds first: their /templates/tags is not a template named "tags".
    register_template_builds(r, *e);
    register_control_plane(r, *e);
    register_code_interpreter(r, *e);
    register_envd(r, *e);
    register_process_service(r, *e);
    return e;
}

}  // namespace cellgate::e2b
