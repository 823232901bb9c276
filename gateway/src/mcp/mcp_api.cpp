// The MCP endpoint (Streamable HTTP): the guard, the transport and the
// JSON-RPC protocol. The tools' calls are in tool_calls.cpp (server.hpp).
// See mcp_api.hpp and docs/mcp.md.
#include "mcp/mcp_api.hpp"

#include "mcp/server.hpp"

#include "agent/agent_service.hpp"
#include "kit/request_models.hpp"
#include "contents/contents_store.hpp"
#include "http/auth.hpp"
#include "mcp/mcp_sessions.hpp"
#include "mcp/rpc_read.hpp"
#include "mcp/tools.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"
#include "util/every.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>

namespace cellgate::mcp {

using namespace http;
using nlohmann::json;

namespace {

constexpr std::array<std::string_view, 2> protocol_versions = {"2025-11-25", "2025-06-18"};

bool supported_version(std::string_view v) {
    return std::find(protocol_versions.begin(), protocol_versions.end(), v) != protocol_versions.end();
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

void expose_headers(response& r) {
    r.headers.emplace_back("Access-Control-Expose-Headers", "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate");
}

// Origin first (a browser page of another site must not reach /mcp even
// with a token it stole), then Authorization: Bearer — never ?token=, which
// the spec forbids and logs keep.
route_guard mcp_guard(std::vector<std::string> allow_origins) {
    return [allow_origins = std::move(allow_origins)](request_context& ctx, const authenticator& auth) -> std::optional<response> {
        if (!origin_allowed(ctx.req, allow_origins))
            return rpc_error(403, nullptr, invalid_request,
                             "Origin not allowed: " + header_value(ctx.req, "Origin").substr(0, 200) +
                                 " (the gateway's own origin and --allow-origin ones are)");
        if (ctx.vouched) return std::nullopt;  // a cluster peer checked the caller's token (http/peer_auth.hpp)
        auto unauthorized = [](const std::string& message, bool invalid) {
            auto r = rpc_error(401, nullptr, invalid_request, message);
            r.headers.emplace_back("WWW-Authenticate",
                                   invalid ? R"(Bearer realm="cellgate", error="invalid_token")" : R"(Bearer realm="cellgate")");
            return r;
        };
        const auto value = header_value(ctx.req, "Authorization");
        const auto space = value.find(' ');
        const auto scheme = lower(value.substr(0, space));
        if (value.empty() || space == std::string::npos || (scheme != "bearer" && scheme != "token"))
            return unauthorized("Authentication required: send 'Authorization: Bearer <cellgate token>'", false);
        auto token = std::string_view(value).substr(space + 1);
        while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
        const auto who = auth.check_token(token);
        if (who.status != authenticator::outcome::ok) return unauthorized("Invalid token", true);
        ctx.who = who.who;
        return std::nullopt;
    };
}

bool accepts(const request& req, std::string_view type) {
    const auto accept = lower(header_value(req, "Accept"));
    if (accept.empty()) return true;  // a client that says nothing takes what comes
    return accept.find(type) != std::string::npos || accept.find("*/*") != std::string::npos;
}

bool is_json_media_type(const request& req) {
    auto ct = lower(header_value(req, "Content-Type"));
    ct = ct.substr(0, ct.find(';'));
    while (!ct.empty() && ct.back() == ' ') ct.pop_back();
    return ct == "application/json";
}

}  // namespace

json rpc_message(const json& id, json result) { return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}; }
json rpc_error_message(const json& id, int code, const std::string& message) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}
response rpc_reply(unsigned status, const json& message) {
    auto r = json_response(status, message);
    expose_headers(r);
    return r;
}
response rpc_error(unsigned status, const json& id, int code, const std::string& message) {
    return rpc_reply(status, rpc_error_message(id, code, message));
}

void server::post(const request_ptr& req, const reply_fn& reply) {
    if (!is_json_media_type(req->req))
        return reply(rpc_error(415, nullptr, invalid_request, "Content-Type must be application/json"));
    if (!accepts(req->req, "application/json"))
        return reply(rpc_error(406, nullptr, invalid_request, "Accept must include application/json and text/event-stream"));
    const auto read = read_rpc(req->req.body());
    if (read.status != 0) return reply(rpc_error(read.status, read.id, read.code, read.error));
    const auto& msg = read.message;
    const bool has_method = read.has_method, has_id = read.has_id;
    if (has_method && has_id && msg["method"] == "initialize") return initialize(req, msg, reply);

    const auto version = header_value(req->req, "MCP-Protocol-Version");
    if (!version.empty() && !supported_version(version))
        return reply(rpc_error(400, has_id ? msg["id"] : json(nullptr), invalid_request,
                               "Unsupported MCP-Protocol-Version '" + version.substr(0, 40) +
                                   "' (this server speaks 2025-11-25 and 2025-06-18)"));
    const auto sid = header_value(req->req, "Mcp-Session-Id");
    if (sid.empty())
        return reply(rpc_error(400, has_id ? msg["id"] : json(nullptr), invalid_request,
                               "Mcp-Session-Id header is required (send initialize first)"));
    const auto session = sessions_.use(req->who.tenant, sid);
    if (!session)
        return reply(rpc_error(404, has_id ? msg["id"] : json(nullptr), session_not_found,
                               "Session not found (it ended or expired): initialize again"));
    if (!has_method) return reply(empty_response(202));  // a response to a request we never send
    if (!has_id) {
        notification(*session, msg);
        return reply(empty_response(202));
    }
    handle_request(req, *session, msg, reply);
}

void server::remove(const request_ptr& req, const reply_fn& reply) {
    const auto sid = header_value(req->req, "Mcp-Session-Id");
    if (sid.empty()) return reply(rpc_error(400, nullptr, invalid_request, "Mcp-Session-Id header is required"));
    if (!sessions_.close(req->who.tenant, sid)) return reply(rpc_error(404, nullptr, session_not_found, "Session not found"));
    reply(empty_response(204));
}

void server::initialize(const request_ptr& req, const json& msg, const reply_fn& reply) {
    const auto& params = msg.contains("params") && msg["params"].is_object() ? msg["params"] : json::object();
    const auto asked = params.contains("protocolVersion") && params["protocolVersion"].is_string()
                           ? params["protocolVersion"].get<std::string>()
                           : std::string();
    if (asked.empty()) return reply(rpc_error(200, msg["id"], invalid_params, "initialize needs params.protocolVersion"));
    const std::string version = supported_version(asked) ? asked : std::string(protocol_versions.front());
    const auto& info = params.contains("clientInfo") && params["clientInfo"].is_object() ? params["clientInfo"] : json::object();
    auto text = [&info](const char* key) {
        return info.contains(key) && info[key].is_string() ? info[key].get<std::string>() : std::string();
    };
    const auto session = sessions_.open(req->who.tenant, version, text("name"), text("version"));
    spdlog::info("tenant {}: MCP session opened by {} {} (protocol {})", req->who.tenant, text("name").substr(0, 64),
                 text("version").substr(0, 32), version);
    json result = {
        {"protocolVersion", version},
        {"capabilities", {{"tools", {{"listChanged", false}}}, {"resources", json::object()}}},
        {"serverInfo", {{"name", "cellgate"}, {"title", "cellgate code interpreter"}, {"version", options_.version}}},
        {"instructions",
         "cellgate runs Python in stateful, sandboxed Jupyter kernels. execute_code without session_id starts a new "
         "session and its result names the session_id: pass it to every later call to keep variables and files. "
         "Cells time out after " +
             std::to_string(options_.default_cell_timeout.count()) +
             " s unless timeout_s says more; there is no network access. Files live in the session's working "
             "directory (write_file, read_file, list_files)."}};
    auto r = rpc_reply(200, rpc_message(msg["id"], std::move(result)));
    r.headers.emplace_back("Mcp-Session-Id", session.id);
    reply(std::move(r));
}

void server::notification(const mcp_session& session, const json& msg) {
    if (msg["method"] != "notifications/cancelled") return;  // initialized, progress, roots/list_changed: nothing to do
    const auto& params = msg.contains("params") && msg["params"].is_object() ? msg["params"] : json::object();
    if (!params.contains("requestId")) return;
    std::shared_ptr<call_state> call;
    {
        std::lock_guard lock(mutex_);
        const auto it = calls_.find(session.id + "\n" + params["requestId"].dump());
        if (it != calls_.end()) call = it->second.lock();
    }
    if (!call) return;  // finished already, or never ours: ignored, as the spec says
    std::function<void()> end;
    std::shared_ptr<agent::execution> exec;
    std::string kernel_id;
    {
        std::lock_guard lock(call->mutex);
        if (call->cancelled) return;
        call->cancelled = true;
        end = std::exchange(call->on_cancel, nullptr);
        exec = call->exec;
        kernel_id = call->kernel_id;
    }
    spdlog::info("MCP request {} cancelled by the client{}", params["requestId"].dump().substr(0, 64),
                 exec ? "; interrupting its cell" : "");
    if (exec) s_.cells->cancel(kernel_id, exec);
    if (end) end();
}

void server::handle_request(const request_ptr& req, const mcp_session& session, const json& msg, const reply_fn& reply) {
    const auto& id = msg["id"];
    const auto method = msg["method"].get<std::string>();
    const auto& params = msg.contains("params") && msg["params"].is_object() ? msg["params"] : json::object();
    if (method == "ping") return reply(rpc_reply(200, rpc_message(id, json::object())));
    if (method == "tools/list") {
        const auto& d = agents_.limits().defaults;
        const auto& m = agents_.limits().maxima;
        const long default_timeout = std::min<long>(options_.default_cell_timeout.count(),
                                                    d.exec_timeout.count() > 0 ? d.exec_timeout.count() : 3600);
        return reply(rpc_reply(200, rpc_message(id, {{"tools", tool_list(default_timeout, m.exec_timeout.count())}})));
    }
    if (method == "tools/call") return call_tool(req, session, id, params, reply);
    if (method == "resources/list") return reply(rpc_reply(200, rpc_message(id, {{"resources", json::array()}})));
    if (method == "resources/templates/list")
        return reply(rpc_reply(
            200, rpc_message(id, {{"resourceTemplates",
                                   json::array({{{"uriTemplate", "cellgate://sessions/{session_id}/files/{+path}"},
                                                 {"name", "session-file"},
                                                 {"title", "A file in a session's working directory"},
                                                 {"description", "Files the code made; their links come with execute_code results."}}})}})));
    if (method == "resources/read") return read_resource(req, id, params, reply);
    reply(rpc_error(200, id, method_not_found, "Method not found: " + method.substr(0, 100)));
}

bool server::admit(const std::string& tenant, const std::string& key, const std::shared_ptr<call_state>& call) {
    std::lock_guard lock(mutex_);
    auto& n = calls_per_tenant_[tenant];
    if (n >= options_.max_calls_per_tenant) return false;
    ++n;
    calls_[key] = call;
    return true;
}

void server::release(const std::string& tenant, const std::string& key) {
    std::lock_guard lock(mutex_);
    calls_.erase(key);
    if (auto it = calls_per_tenant_.find(tenant); it != calls_per_tenant_.end() && --it->second == 0)
        calls_per_tenant_.erase(it);
}

void server::call_tool(const request_ptr& req, const mcp_session& session, const json& id, const json& params,
                       const reply_fn& reply) {
    if (!params.contains("name") || !params["name"].is_string())
        return reply(rpc_error(200, id, invalid_params, "tools/call needs params.name"));
    const auto name = params["name"].get<std::string>();
    if (!is_tool(name)) return reply(rpc_error(200, id, invalid_params, "Unknown tool: " + name.substr(0, 100)));
    const auto args = params.contains("arguments") && !params["arguments"].is_null() ? params["arguments"] : json::object();
    if (const auto why = check_arguments(name, args); !why.empty())
        return reply(rpc_reply(200, rpc_message(id, text_result("Invalid arguments for " + name + ": " + why, true))));
    json token;
    if (params.contains("_meta") && params["_meta"].is_object() && params["_meta"].contains("progressToken")) {
        token = params["_meta"]["progressToken"];
        if (!token.is_string() && !token.is_number_integer()) token = nullptr;
    }

    const auto tenant = req->who.tenant;
    const auto key = session.id + "\n" + id.dump();
    auto call = std::make_shared<call_state>();
    if (!admit(tenant, key, call))
        return reply(rpc_reply(200, rpc_message(id, text_result("Too many tool calls of yours are running (" +
                                                                    std::to_string(options_.max_calls_per_tenant) +
                                                                    "); wait for one to finish",
                                                                true))));
    // Released when the last callback that can answer is gone.
    auto ticket = std::shared_ptr<void>(nullptr, [weak = weak_from_this(), tenant, key](void*) {
        if (auto self = weak.lock()) self->release(tenant, key);
    });
    const bool stream = name == "execute_code" && accepts(req->req, "text/event-stream") &&
                        !header_value(req->req, "Accept").empty();
    if (!stream) {
        auto once = std::make_shared<std::atomic<bool>>(false);
        auto answer = [reply, once, ticket](response r) {
            if (!once->exchange(true)) reply(std::move(r));
        };
        call->on_cancel = [answer, id] { answer(rpc_error(200, id, request_cancelled, "Request cancelled")); };
        return run_tool(tenant, name, args, call, [answer, id, call](json result) {
            {
                std::lock_guard lock(call->mutex);
                call->on_cancel = nullptr;
            }
            answer(rpc_reply(200, rpc_message(id, std::move(result))));
        });
    }

    response res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache, no-transform");
    res.headers.emplace_back("X-Accel-Buffering", "no");
    expose_headers(res);
    res.stream = [self = shared_from_this(), tenant, name, args, call, id, token, ticket](std::shared_ptr<stream_sink> sink) {
        auto closed = std::make_shared<std::atomic<bool>>(false);
        auto end = [sink, closed] {
            if (!closed->exchange(true)) sink->close();
        };
        const auto started = std::chrono::steady_clock::now();
        auto last_progress = std::make_shared<std::atomic<long long>>(0);
        auto stop_keepalive = std::make_shared<std::function<void()>>(
            util::every(self->agents_.io(), std::chrono::seconds(15), [sink] { sink->write(": keepalive\n\n"); }));
        auto stop_progress = std::make_shared<std::function<void()>>();
        if (!token.is_null())
            *stop_progress = util::every(self->agents_.io(), self->options_.progress_interval,
                                         [sink, call, token, started, last_progress] {
                const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - started).count();
                // Strictly increasing, as the spec requires.
                const long long progress = std::max<long long>(elapsed, last_progress->load() + 1);
                last_progress->store(progress);
                std::string message = "running for " + std::to_string(elapsed / 1000) + " s";
                {
                    std::lock_guard lock(call->mutex);
                    if (!call->last_output.empty()) message += "; last output: " + call->last_output;
                }
                json body = {{"progressToken", token}, {"progress", progress}, {"message", message}};
                json note = {{"jsonrpc", "2.0"}, {"method", "notifications/progress"}, {"params", std::move(body)}};
                sink->write(sse_event("message", note));
            });
        auto stop_ticks = [stop_keepalive, stop_progress] {
            if (*stop_keepalive) (*stop_keepalive)();
            if (*stop_progress) (*stop_progress)();
        };
        {
            std::lock_guard lock(call->mutex);
            call->on_cancel = [end, stop_ticks] {
                stop_ticks();
                end();
            };
        }
        // A client that goes away has not cancelled (the spec): its cell
        // runs on within its time limit, and the result is dropped.
        sink->on_disconnect([stop_ticks] { stop_ticks(); });
        self->run_tool(tenant, name, args, call, [sink, end, stop_ticks, call, id, ticket](json result) {
            stop_ticks();
            {
                std::lock_guard lock(call->mutex);
                if (call->cancelled) return;
                call->on_cancel = nullptr;
            }
            sink->write(sse_event("message", rpc_message(id, std::move(result))));
            end();
        });
    };
    reply(std::move(res));
}

std::shared_ptr<void> register_mcp_api(router& r, kit::services& s, agent::agent_service& agents,
                                       kernels::state_store* store, const mcp_options& options) {
    auto srv = std::make_shared<server>(s, agents, store, options);
    const auto guard = mcp_guard(options.allow_origins);
    r.add_guarded(bhttp::verb::post, "/mcp", guard, [srv](const request_ptr& req, reply_fn reply) { srv->post(req, reply); });
    r.add_guarded(bhttp::verb::delete_, "/mcp", guard, [srv](const request_ptr& req, reply_fn reply) { srv->remove(req, reply); });
    r.add_guarded(bhttp::verb::get, "/mcp", guard, [](const request_ptr&, reply_fn reply) {
        auto res = error_response(405, "This server pushes nothing: there is no GET stream (POST and DELETE only)");
        res.headers.emplace_back("Allow", "POST, DELETE");
        reply(std::move(res));
    });
    return srv;
}

}  // namespace cellgate::mcp
