// libFuzzer target: what the gateway does with the bytes of an HTTP
// connection before any sandbox is involved. The input is the byte stream a
// client sends; it is read the way http_session (gateway/src/http/http_session.hpp)
// reads it (Beast's parser, headers first, the gateway's header and body
// limits, keep-alive pipelining, short reads), and each request goes through
// the gateway's own request handling, http::admit and http::dispatch (route
// matching with per-segment %-decoding, query parsing, the token check before
// any body is read, body limits per kind of route, exception mapping), then
// Origin checks, the WebSocket subprotocol offer, the JSON body models of the
// handlers (kit/request_models),
// multipart forms, workspace path checks, and the sandbox spec schema the
// launcher service will read. What needs a live kernel (starting one, files in
// a workspace) is left out; the body models are parsed as if the kernel
// existed.
//
// Beyond "no crash and no sanitizer report", it traps on:
//   - a handler-side exception other than api_exception (status 400-599) or a
//     nlohmann type error: the server would answer 500 to a client's mistake;
//   - a body admitted for reading on a route that needs a token, without one,
//     or a public route admitted with more than its small body limit;
//   - a response that, written out and parsed again, has other headers or
//     another body than were set (response splitting through a path, a file
//     name or a request header), or whose JSON error body does not parse;
//   - a workspace path accepted with NUL, "..", a leading '/' or bad UTF-8;
//   - a sandbox spec that does not survive to_json → from_json.
//
// The read size (how many bytes each read returns) and the limits (the
// gateway's defaults, or small ones so the limit paths are reachable) follow
// from the input's length, so every input is plain HTTP that replays with nc.

#include "kit/request_models.hpp"
#include "agent/agent_service.hpp"
#include "core/cell_request.hpp"
#include "core/session_request.hpp"
#include "contents/contents_store.hpp"
#include "http/auth.hpp"
#include "http/http_types.hpp"
#include "http/router.hpp"
#include "http/dispatch.hpp"
#include "http/peer_auth.hpp"
#include "http/server_options.hpp"
#include "kernels/kernel.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"
#include "util/multipart.hpp"
#include "util/cluster_secret.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <cctype>

#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
using namespace cellgate;
using http::request;
using nlohmann::json;

constexpr std::string_view fuzz_token = "fuzz-token-0123456789";
constexpr std::size_t max_requests_per_input = 32;

// How the gateway registers its routes (main.cpp: misc, kernels, sessions,
// contents, agent, static, each in its file's order). Order matters: the
// first match wins and 405 lists every method of the path.
struct route_def {
    bhttp::verb method;
    const char* pattern;
    bool upload;
};
constexpr route_def gateway_routes[] = {
    {bhttp::verb::get, "/api", false},
    {bhttp::verb::get, "/healthz", false},
    {bhttp::verb::get, "/api/status", false},
    {bhttp::verb::get, "/api/me", false},
    {bhttp::verb::get, "/metrics", false},
    {bhttp::verb::get, "/api/kernelspecs", false},
    {bhttp::verb::get, "/api/kernelspecs/{name}", false},
    {bhttp::verb::get, "/kernelspecs/{name}/{file}", false},
    {bhttp::verb::get, "/api/kernels", false},
    {bhttp::verb::post, "/api/kernels", false},
    {bhttp::verb::get, "/api/kernels/{kernel_id}", false},
    {bhttp::verb::delete_, "/api/kernels/{kernel_id}", false},
    {bhttp::verb::post, "/api/kernels/{kernel_id}/interrupt", false},
    {bhttp::verb::post, "/api/kernels/{kernel_id}/restart", false},
    {bhttp::verb::get, "/api/kernels/{kernel_id}/channels", false},
    {bhttp::verb::get, "/api/sessions", false},
    {bhttp::verb::post, "/api/sessions", false},
    {bhttp::verb::get, "/api/sessions/{session_id}", false},
    {bhttp::verb::patch, "/api/sessions/{session_id}", false},
    {bhttp::verb::delete_, "/api/sessions/{session_id}", false},
    {bhttp::verb::get, "/api/contents/{path*}", false},
    {bhttp::verb::put, "/api/contents/{path*}", false},
    {bhttp::verb::post, "/api/contents/{path*}", false},
    {bhttp::verb::patch, "/api/contents/{path*}", false},
    {bhttp::verb::delete_, "/api/contents/{path*}", false},
    {bhttp::verb::get, "/files/{path*}", false},
    {bhttp::verb::post, "/v1/sessions", false},
    {bhttp::verb::get, "/v1/sessions", false},
    {bhttp::verb::get, "/v1/sessions/{id}", false},
    {bhttp::verb::delete_, "/v1/sessions/{id}", false},
    {bhttp::verb::post, "/v1/sessions/{id}/interrupt", false},
    {bhttp::verb::post, "/v1/sessions/{id}/restart", false},
    {bhttp::verb::post, "/v1/sessions/{id}/execute", false},
    {bhttp::verb::get, "/v1/sessions/{id}/files", false},
    {bhttp::verb::post, "/v1/sessions/{id}/files", false},
    {bhttp::verb::put, "/v1/sessions/{id}/files/{path*}", true},
    {bhttp::verb::get, "/v1/sessions/{id}/files/{path*}", false},
    {bhttp::verb::delete_, "/v1/sessions/{id}/files/{path*}", false},
    {bhttp::verb::post, "/v1/execute", false},
    {bhttp::verb::get, "/", false},
    {bhttp::verb::get, "/static/{path*}", false},
    {bhttp::verb::get, "/static-config.json", false},
};
struct fixture;
std::vector<std::pair<std::string, std::string>> run_handler(const fixture& fx, const http::request_context& ctx,
                                                             bhttp::verb method);

struct fixture {
    http::router routes;
    http::authenticator auth{{{std::string(fuzz_token), "default", "default", 0},
                              {"other-tenant-token", "acme", "ci", 4}}};
    std::vector<std::string> allow_origins{"https://lab.example.com", "*"};
    agent::agent_limits limits;
    // A cluster node's view: ids whose tag starts with 1 are a peer's, with 2
    // a departed node's (http/hop.hpp).
    // Requests between nodes are signed under the cluster's secret (http/peer_auth.hpp).
    std::shared_ptr<http::peer_auth> peers = std::make_shared<http::peer_auth>(
        "0a0b0c0d", std::make_shared<const util::cluster_secret>(std::string(48, 'k')), [] { return std::int64_t{1800000000}; });
    http::hop_rules hops{"0a0b0c0d",
                         [](const std::string& tag) {
                             if (tag.front() == '1') return http::hop_owner{http::hop_owner::kind::peer, "127.0.0.1:1"};
                             if (tag.front() == '2') return http::hop_owner{http::hop_owner::kind::gone, {}};
                             return http::hop_owner{};
                         },
                         peers};

    fixture() {
        for (const auto& r : gateway_routes) {
            if (r.upload) {
                routes.add_upload(r.method, r.pattern, {});
                continue;
            }
            // The handlers' reading of the request; the reply carries the
            // headers they would set from request data.
            routes.add(r.method, r.pattern, [this](const http::request_ptr& ctx, http::reply_fn reply) {
                http::response res = http::json_response(200, json::object());
                res.headers = run_handler(*this, *ctx, ctx->req.method());
                reply(std::move(res));
            });
        }
    }
};

struct limits {
    std::size_t read_size;
    std::uint32_t header_bytes;
    std::uint64_t body_bytes;
    std::uint64_t upload_bytes;
};

limits limits_for(std::size_t input_size) {
    static constexpr std::size_t read_sizes[] = {std::numeric_limits<std::size_t>::max(), 1, 3, 17, 512};
    const http::server_options defaults;
    limits l{read_sizes[input_size % 5], static_cast<std::uint32_t>(defaults.max_header_bytes),
             defaults.max_body_bytes, kernels::kernel_policy{}.upload_limit_bytes};
    if ((input_size / 5) % 2 == 1) {  // tight: the limit paths are reachable with small inputs
        l.header_bytes = 512;
        l.body_bytes = 1024;
        l.upload_bytes = 2048;
    }
    return l;
}

[[noreturn]] void finding() { __builtin_trap(); }

// Runs one piece of handler code the way the server's handle() catches it.
template <class Fn>
void as_handler(Fn fn) {
    try {
        fn();
    } catch (const api_exception& e) {
        if (e.status() < 400 || e.status() > 599) finding();
    } catch (const nlohmann::json::exception&) {
        // The server answers 400 "A field in the request body has the wrong type".
    } catch (...) {
        finding();  // the server would answer 500 Internal error
    }
}

void check_workspace_path(std::string_view raw) {
    std::string p;
    try {
        p = contents::contents_store::check_path(raw);
    } catch (const contents::contents_error& e) {
        if (e.kind() != contents::error_kind::bad_path) finding();
        return;
    }
    if (p != raw || (!p.empty() && p.front() == '/') || p.find('\0') != std::string::npos || !is_valid_utf8(p))
        finding();
    for (std::size_t start = 0; start <= p.size() && !p.empty();) {
        const auto slash = p.find('/', start);
        const auto part = std::string_view(p).substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        if (part.empty() || part == "." || part == "..") finding();
        if (slash == std::string::npos) break;
        start = slash + 1;
    }
}

// The launcher service's request schema: what parses must round-trip.
void check_sandbox_spec(const json& body) {
    launcher::sandbox_spec spec;
    try {
        launcher::from_json(body, spec);
    } catch (const launcher::launch_error&) {
        return;
    } catch (const nlohmann::json::exception&) {
        return;
    } catch (...) {
        finding();
    }
    json out;
    launcher::to_json(out, spec);
    launcher::sandbox_spec again;
    try {
        launcher::from_json(out, again);
    } catch (...) {
        finding();
    }
    json out_again;
    launcher::to_json(out_again, again);
    if (out != out_again) finding();
}

// "<kernel_id>/<rest>" as contents_api's locate() splits it.
void check_contents_path(std::string p) {
    while (!p.empty() && p.back() == '/') p.pop_back();
    while (!p.empty() && p.front() == '/') p.erase(0, 1);
    const auto slash = p.find('/');
    check_workspace_path(slash == std::string::npos ? std::string_view{} : std::string_view(p).substr(slash + 1));
}

// The handlers' reading of the request, per route (see gateway/src/jupyter/ and gateway/src/v1/).
// Returns headers the handler would set from request data.
std::vector<std::pair<std::string, std::string>> run_handler(const fixture& fx, const http::request_context& ctx,
                                                             bhttp::verb method) {
    std::vector<std::pair<std::string, std::string>> headers;
    const auto& route = ctx.route;
    const auto path_param = [&] { return ctx.params.count("path") ? ctx.params.at("path") : std::string(); };
    const auto body = [&](bool allow_empty) {
        auto j = ctx.json_body(allow_empty);
        check_sandbox_spec(j);
        return j;
    };

    if (route == "/api/kernels" && method == bhttp::verb::post) {
        as_handler([&] {
            const auto b = body(true);
            (void)kit::kernel_name_from(b);
            (void)kit::kernel_env_from(b);
        });
    } else if (route == "/api/sessions" && method == bhttp::verb::post) {
        as_handler([&] {
            const auto b = body(false);
            (void)kit::session_fields_from(b);
            const auto kernel = kit::kernel_member(b);
            if (kit::string_field(kernel, "id").empty()) {
                (void)kit::string_field(kernel, "name");
                (void)kit::kernel_env_from(kernel);
            }
        });
    } else if (route == "/api/sessions/{session_id}" && method == bhttp::verb::patch) {
        as_handler([&] {
            const auto b = body(false);
            (void)kit::string_field(b, "path", "old");
            (void)kit::string_field(b, "name", "old");
            (void)kit::string_field(b, "type", "notebook");
            if (b.contains("kernel") && !b["kernel"].is_null()) {
                const auto kernel = kit::kernel_member(b);
                if (kit::string_field(kernel, "id").empty()) (void)kit::kernel_env_from(kernel);
            }
        });
    } else if (route == "/api/contents/{path*}" || route == "/files/{path*}") {
        const auto path = path_param();
        check_contents_path(path);
        as_handler([&] {
            if (method == bhttp::verb::put) {
                const auto b = body(false);
                const bool notebook = path.size() > 6 && path.ends_with(".ipynb");
                const auto type = b.value("type", std::string(notebook ? "notebook" : "file"));
                if (type != "directory") (void)kit::contents_payload_from(b, type);
            } else if (method == bhttp::verb::post) {
                (void)kit::new_entry_from(body(true));
            } else if (method == bhttp::verb::patch) {
                check_contents_path(kit::rename_target_from(body(false)));
            }
        });
        if (method == bhttp::verb::put || method == bhttp::verb::post)
            headers.emplace_back("Location", "/api/contents/" + url_encode_path(path));
        if (method == bhttp::verb::get && ctx.query.count("download") != 0)
            headers.emplace_back("Content-Disposition",
                                 http::attachment_disposition(std::filesystem::path(path).filename().string()));
    } else if (route == "/v1/sessions" && method == bhttp::verb::post) {
        as_handler([&] {
            const auto b = body(true);
            (void)core::policy_for(kit::session_request_from(b, "fuzz"), fx.limits.defaults, fx.limits);
        });
    } else if (route == "/v1/sessions/{id}/execute") {
        as_handler([&] { (void)core::cell_options(kit::cell_request_from(body(false)), fx.limits.defaults, fx.limits); });
    } else if (route == "/v1/execute") {
        as_handler([&] {
            const auto b = body(false);
            auto cell = kit::cell_request_from(b);
            cell.inline_files = true;
            for (const auto& [p, data] : kit::inline_files_from(b)) check_workspace_path(p);
            auto ask = core::session_for("fuzz");
            ask.env = kit::strict_env(b);
            ask.limits = kit::limits_asked_from(b);
            const auto policy = core::policy_for(ask, fx.limits.defaults, fx.limits);
            (void)core::cell_options(cell, policy, fx.limits);
        });
    } else if (route == "/v1/sessions/{id}/files" && method == bhttp::verb::post) {
        as_handler([&] {
            const auto ct = ctx.req[bhttp::field::content_type];
            const auto boundary = multipart_boundary(std::string_view(ct.data(), ct.size()));
            if (!boundary) throw api_exception(415, "Expected multipart/form-data with a boundary");
            const auto parts = parse_multipart(ctx.req.body(), *boundary);
            if (!parts) throw api_exception(400, "The multipart body is malformed");
            const auto dir = kit::form_directory(*parts);
            for (const auto& p : *parts) {
                const auto& b = ctx.req.body();
                if (!p.data.empty() && (p.data.data() < b.data() || p.data.data() + p.data.size() > b.data() + b.size()))
                    finding();  // a part's view must point into the body
                if (p.filename) check_workspace_path(kit::form_file_path(p, dir));
            }
        });
    } else if (route == "/v1/sessions/{id}/files" && method == bhttp::verb::get) {
        check_workspace_path(ctx.query_value("path").value_or(""));
    } else if (route == "/v1/sessions/{id}/files/{path*}") {
        const auto path = path_param();
        check_workspace_path(path);
        if (method == bhttp::verb::get && ctx.query.count("download") != 0)
            headers.emplace_back("Content-Disposition",
                                 http::attachment_disposition(std::filesystem::path(path).filename().string()));
    }
    return headers;
}

// Writes the response out and parses it back: what was set must be what a
// client reads.
void check_response(const http::response& r, const request* req, const fixture& fx) {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), 11};
    (void)http::set_response_headers(res.base(), r, req, fx.allow_origins);
    res.body() = r.body;
    res.prepare_payload();
    std::size_t fields = 0;
    for (const auto& f : res) {
        (void)f;
        ++fields;
    }
    std::ostringstream out;
    out << res;
    const auto wire = out.str();

    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    beast::error_code ec;
    const auto used = parser.put(boost::asio::buffer(wire), ec);
    if (ec || !parser.is_done() || used != wire.size()) finding();
    const auto& back = parser.get();
    std::size_t fields_back = 0;
    for (const auto& f : back) {
        (void)f;
        ++fields_back;
    }
    if (fields_back != fields || back.body() != r.body || back.result_int() != r.status) finding();
    if (!r.body.empty() && r.content_type == "application/json") {
        const auto j = json::parse(r.body, nullptr, false);
        if (j.is_discarded() || !j.is_object()) finding();
        if (r.status >= 400 && (!j["reason"].is_string() || !j["message"].is_string())) finding();
    }
}

// The checks on what admit() decided for one request.
void check_admission(const http::admission& a, const http::server_options& opts, const fixture& fx) {
    using action = http::admission::action;
    const auto& ctx = *a.ctx;
    for (const auto& [k, v] : ctx.query)
        if (k.find('\0') != std::string::npos || v.find('\0') != std::string::npos) finding();
    for (const auto& [name, value] : ctx.params)
        if (value.find('\0') != std::string::npos) finding();
    if (a.what == action::respond) return;
    if (a.what == action::forward) {
        // Only another node's well-formed tag is relayed, to the peer's address.
        const auto& t = a.forward_tag;
        if (t.size() != 8 || t == "0a0b0c0d" || t.front() != '1' || a.forward_to != "127.0.0.1:1") finding();
        for (const char c : t)
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) finding();
        const auto head = http::hop_request_head(ctx.req.base(), "127.0.0.1", *fx.peers, t,
                                                 a.forward_who ? &*a.forward_who : nullptr);
        if (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0 ||
            head.find("\r\nX-Cellgate-Hop: 0a0b0c0d\r\n") == std::string::npos ||
            head.find("\r\nX-Cellgate-Peer: ") == std::string::npos)
            finding();
        // The caller's credentials never go to the peer.
        for (std::size_t at = head.find("\r\n"); at != std::string::npos; at = head.find("\r\n", at + 2)) {
            const auto colon = head.find(':', at + 2);
            if (colon == std::string::npos) break;
            std::string name = head.substr(at + 2, colon - at - 2);
            for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            if (name == "authorization" || name == "x-api-key" || name == "cookie") finding();
        }
        return;
    }
    const bool is_public = http::public_route(ctx.route) && a.what != action::upload;
    if (!is_public && ctx.who.tenant.empty()) finding();  // past the token check without a token
    if (a.what == action::read_body) {
        if (a.handler == nullptr) finding();
        if (is_public && a.body_limit > opts.max_public_body_bytes) finding();
    }
    if (a.what == action::upgrade && ctx.route != http::channels_pattern) finding();
}

// The WebSocket upgrade's reading of the request (http_session::upgrade).
void check_upgrade(const http::request_context& ctx, const fixture& fx) {
    (void)http::origin_allowed(ctx.req, fx.allow_origins);
    (void)http::origin_allowed(ctx.req, {});
    const auto offered = ctx.req[bhttp::field::sec_websocket_protocol];
    (void)http::header_list_contains(std::string_view(offered.data(), offered.size()), "v1.kernel.websocket.jupyter.org");
    (void)kernels::valid_session_id(ctx.query_value("session_id").value_or(""));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const fixture fx;
    const auto lim = limits_for(size);

    boost::asio::io_context ioc;
    beast::test::stream client(ioc, std::string_view(reinterpret_cast<const char*>(data), size));
    client.read_size(lim.read_size);
    client.close_remote();  // the client sends these bytes, then EOF
    beast::flat_buffer buffer;

    http::server_options opts;
    opts.max_body_bytes = lim.body_bytes;
    opts.max_public_body_bytes = std::min<std::size_t>(opts.max_public_body_bytes, lim.body_bytes);
    for (std::size_t n = 0; n < max_requests_per_input; ++n) {
        // Headers first (http_session::do_read / on_header).
        bhttp::request_parser<bhttp::empty_body> header_parser;
        header_parser.header_limit(lim.header_bytes);
        header_parser.body_limit(std::numeric_limits<std::uint64_t>::max());
        beast::error_code ec;
        bhttp::read_header(client, buffer, header_parser, ec);
        if (ec == bhttp::error::header_limit) {
            check_response(http::error_response(431, "Request headers too large"), nullptr, fx);
            break;
        }
        if (ec) break;  // end of stream, malformed, cut short: nothing to answer
        const auto a = http::admit({fx.routes, fx.auth, opts, &fx.hops}, header_parser.get(), "127.0.0.1");
        check_admission(a, opts, fx);
        const auto& ctx = *a.ctx;
        using action = http::admission::action;
        if (a.what == action::forward) break;  // the connection now belongs to the relay
        if (a.what == action::respond) {
            check_response(a.reply, &ctx.req, fx);
            if (a.close_after || !ctx.req.keep_alive()) break;
            continue;
        }
        if (a.what == action::upgrade) {
            check_upgrade(ctx, fx);
            break;  // the socket now belongs to the WebSocket session
        }
        // The body: into memory (an upload goes to a file in the server; the
        // parsing is the same).
        const auto max_body = a.what == action::upload ? lim.upload_bytes : a.body_limit;
        bhttp::request_parser<bhttp::string_body> parser(std::move(header_parser));
        parser.body_limit(max_body);
        bhttp::read(client, buffer, parser, ec);
        if (ec == bhttp::error::body_limit) {
            check_response(http::body_too_large(max_body), &ctx.req, fx);
            break;
        }
        if (ec) break;
        a.ctx->req.body() = std::move(parser.get().body());
        if (a.what == action::upload) {
            http::response r = http::empty_response(201);
            r.headers = run_handler(fx, ctx, ctx.req.method());
            check_response(r, &ctx.req, fx);
        } else {
            bool replied = false;
            http::dispatch(a, [&](http::response r) {
                if (replied) finding();
                replied = true;
                check_response(r, &ctx.req, fx);
            });
            if (!replied) finding();
        }
        if (!ctx.req.keep_alive()) break;
    }
    return 0;
}
