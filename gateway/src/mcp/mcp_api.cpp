// The MCP endpoint (Streamable HTTP). See mcp_api.hpp and docs/mcp.md.
#include "mcp/mcp_api.hpp"

#include "agent/agent_service.hpp"
#include "api/request_models.hpp"
#include "contents/contents_store.hpp"
#include "http/auth.hpp"
#include "mcp/mcp_sessions.hpp"
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
constexpr std::size_t default_read_bytes = 64u << 10, max_read_bytes = 8u << 20;
constexpr std::size_t max_image_read_bytes = 2u << 20;
constexpr std::size_t max_listed = 1000;

// JSON-RPC error codes (none in -32020…-32099: a 2026 client reads those as
// modern-era errors).
constexpr int parse_error = -32700, invalid_request = -32600, method_not_found = -32601, invalid_params = -32602,
              session_not_found = -32001, resource_not_found = -32002, request_cancelled = -32800;

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

// Origin first (a browser page of another site must not reach /mcp even
// with a token it stole), then Authorization: Bearer — never ?token=, which
// the spec forbids and logs keep.
route_guard mcp_guard(std::vector<std::string> allow_origins) {
    return [allow_origins = std::move(allow_origins)](request_context& ctx, const authenticator& auth) -> std::optional<response> {
        if (!origin_allowed(ctx.req, allow_origins))
            return rpc_error(403, nullptr, invalid_request,
                             "Origin not allowed: " + header_value(ctx.req, "Origin").substr(0, 200) +
                                 " (the gateway's own origin and --allow-origin ones are)");
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

std::string failure_text(const kernels::failure& f) {
    using k = kernels::failure_kind;
    std::string hint;
    if (f.kind == k::over_quota) hint = " Close a session you no longer need (close_session) or reuse a session_id.";
    if (f.kind == k::start_failed || f.kind == k::unavailable) hint = " Try again in a few seconds.";
    return "Could not start a session: " + f.message + "." + hint;
}

std::string not_found_text(const std::string& id) {
    return "Session '" + id.substr(0, 64) +
           "' not found: it ended (idle timeout, lifetime or close_session) or is not yours. Omit session_id to "
           "start a new session.";
}

std::string session_text(const kernels::kernel& k, const kernels::kernelspec* spec) {
    const auto m = api::session_model(k, spec);
    std::string t = "session_id: " + m["id"].get<std::string>() + "\nkernel: " + m["kernel"].get<std::string>() +
                    "\nstate: " + m["state"].get<std::string>() + "\ncreated: " + m["created"].get<std::string>() +
                    "\nlast_activity: " + m["last_activity"].get<std::string>() + "\n";
    if (m["expires_at"].is_string()) t += "expires_at: " + m["expires_at"].get<std::string>() + "\n";
    const auto& l = m["limits"];
    t += "limits: cell timeout " + l["timeout_s"].dump() + " s, idle timeout " + l["idle_timeout_s"].dump() + " s";
    if (l.contains("memory_bytes")) t += ", memory " + std::to_string(l["memory_bytes"].get<std::uint64_t>() >> 20) + " MiB";
    return t + "\n";
}

std::string optional_string(const json& args, const char* key) {
    const auto it = args.find(key);
    return it == args.end() || it->is_null() ? std::string() : it->get<std::string>();
}

using done_fn = std::function<void(json result)>;

// One tools/call in flight: what cancellation needs to reach it.
struct call_state {
    std::mutex mutex;
    bool cancelled = false;
    std::string kernel_id;
    std::shared_ptr<agent::execution> exec;
    std::function<void()> on_cancel;  // ends the response (stream closed, or a JSON error)
    std::string last_output;          // for progress messages
};

class server : public std::enable_shared_from_this<server> {
public:
    server(api::services& s, agent::agent_service& agents, kernels::state_store* store, mcp_options options)
        : s_(s), agents_(agents), options_(std::move(options)),
          sessions_(store, options_.max_sessions_per_tenant, options_.session_idle) {
        sessions_.load();
    }

    void post(const request_ptr& req, const reply_fn& reply);
    void remove(const request_ptr& req, const reply_fn& reply);

private:
    void handle_request(const request_ptr& req, const mcp_session& session, const json& msg, const reply_fn& reply);
    void notification(const mcp_session& session, const json& msg);
    void initialize(const request_ptr& req, const json& msg, const reply_fn& reply);
    void call_tool(const request_ptr& req, const mcp_session& session, const json& id, const json& params,
                   const reply_fn& reply);
    void read_resource(const request_ptr& req, const json& id, const json& params, const reply_fn& reply);

    // The tools. Each answers through `done` exactly once (or not at all once cancelled).
    void run_tool(const std::string& tenant, const std::string& name, const json& args,
                  const std::shared_ptr<call_state>& call, const done_fn& done);
    void execute_code(const std::string& tenant, const json& args, const std::shared_ptr<call_state>& call,
                      const done_fn& done);
    void run_cell(const kernels::kernel_ptr& k, bool fresh, const json& args, const std::shared_ptr<call_state>& call,
                  const done_fn& done);
    void create_session(const std::string& tenant, const json& args, const done_fn& done);
    void close_session(const std::string& tenant, const json& args, const done_fn& done);
    void snapshot_session(const std::string& tenant, const json& args, const done_fn& done);
    void fork_session(const std::string& tenant, const json& args, const done_fn& done);
    void write_file(const std::string& tenant, const json& args, const done_fn& done);
    void read_file(const std::string& tenant, const json& args, const done_fn& done);
    void list_files(const std::string& tenant, const json& args, const done_fn& done);
    // `k` found (or made, when `create` and no session_id) for a file tool.
    void with_session(const std::string& tenant, const json& args, bool create,
                      std::function<void(kernels::kernel_ptr, bool fresh)> then, const done_fn& done);
    // `work` on the file-I/O pool under the tenant; what it throws becomes an isError result.
    void on_file_pool(const std::string& tenant, const done_fn& done, std::function<json()> work);

    // In-flight bookkeeping: false when the tenant has too many calls open.
    bool admit(const std::string& tenant, const std::string& key, const std::shared_ptr<call_state>& call);
    void release(const std::string& tenant, const std::string& key);

    api::services& s_;
    agent::agent_service& agents_;
    mcp_options options_;
    mcp_sessions sessions_;
    std::mutex mutex_;
    std::map<std::string, std::weak_ptr<call_state>> calls_;  // by MCP session id + request id
    std::map<std::string, std::size_t> calls_per_tenant_;
};

void server::post(const request_ptr& req, const reply_fn& reply) {
    if (!is_json_media_type(req->req))
        return reply(rpc_error(415, nullptr, invalid_request, "Content-Type must be application/json"));
    if (!accepts(req->req, "application/json"))
        return reply(rpc_error(406, nullptr, invalid_request, "Accept must include application/json and text/event-stream"));
    const auto& body = req->req.body();
    if (!json_nesting_within(body, max_body_json_depth))
        return reply(rpc_error(400, nullptr, parse_error, "Parse error: the body is nested too deeply"));
    const auto msg = json::parse(body, nullptr, false);
    if (msg.is_discarded()) return reply(rpc_error(400, nullptr, parse_error, "Parse error: the body is not JSON"));
    if (msg.is_array())
        return reply(rpc_error(400, nullptr, invalid_request,
                               "Batches are not supported: send one JSON-RPC message per POST (MCP 2025-06-18 and later)"));
    if (!msg.is_object() || msg.value("jsonrpc", json()) != "2.0")
        return reply(rpc_error(400, nullptr, invalid_request, "Not a JSON-RPC 2.0 message"));
    const bool has_method = msg.contains("method") && msg["method"].is_string();
    const bool has_id = msg.contains("id") && (msg["id"].is_string() || msg["id"].is_number_integer());
    if (msg.contains("id") && !has_id)
        return reply(rpc_error(400, nullptr, invalid_request, "A request id must be a string or an integer"));
    if (!has_method && !(has_id && (msg.contains("result") || msg.contains("error"))))
        return reply(rpc_error(400, has_id ? msg["id"] : json(nullptr), invalid_request, "A request needs a 'method'"));

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

void server::run_tool(const std::string& tenant, const std::string& name, const json& args,
                      const std::shared_ptr<call_state>& call, const done_fn& done) {
    // Errors become isError results the model can act on (SEP-1303).
    auto safe_done = [done](json r) { done(std::move(r)); };
    try {
        if (name == "execute_code") return execute_code(tenant, args, call, safe_done);
        if (name == "create_session") return create_session(tenant, args, safe_done);
        if (name == "close_session") return close_session(tenant, args, safe_done);
        if (name == "snapshot_session") return snapshot_session(tenant, args, safe_done);
        if (name == "fork_session") return fork_session(tenant, args, safe_done);
        if (name == "write_file") return write_file(tenant, args, safe_done);
        if (name == "read_file") return read_file(tenant, args, safe_done);
        if (name == "list_files") return list_files(tenant, args, safe_done);
        if (name == "list_sessions") {
            std::string t;
            for (const auto& k : s_.kernels.list(tenant))
                t += session_text(*k, s_.kernels.specs().find(k->spec_name())) + "\n";
            return safe_done(text_result(t.empty() ? "No open sessions." : t));
        }
    } catch (const api_exception& e) {
        return safe_done(text_result(e.what(), true));
    } catch (const contents::contents_error& e) {
        return safe_done(text_result(e.what(), true));
    } catch (const std::exception& e) {
        spdlog::error("MCP tool {}: {}", name, e.what());
        return safe_done(text_result("Internal error", true));
    }
}

void server::execute_code(const std::string& tenant, const json& args, const std::shared_ptr<call_state>& call,
                          const done_fn& done) {
    const auto sid = optional_string(args, "session_id");
    if (!sid.empty()) {
        const auto k = s_.kernels.find(tenant, sid);
        if (!k) return done(text_result(not_found_text(sid), true));
        return run_cell(k, false, args, call, done);
    }
    s_.core->start(core::session_for(tenant),
                             [self = shared_from_this(), args, call, done](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                                 if (e) return done(text_result(failure_text(*e), true));
                                 try {
                                     self->run_cell(k, true, args, call, done);
                                 } catch (const api_exception& ex) {
                                     done(text_result(ex.what(), true));
                                 }
                             });
}

void server::run_cell(const kernels::kernel_ptr& k, bool fresh, const json& args, const std::shared_ptr<call_state>& call,
                      const done_fn& done) {
    // A paused session resumes when its policy lets it; a dead kernel is revived and the cell refused.
    if (const auto no = s_.cells->ready(k)) return done(text_result(no->why.message, true));
    const auto policy_timeout = k->policy().exec_timeout.count();
    json ask = {{"code", args["code"]}};
    ask["timeout_s"] = args.contains("timeout_s") && !args["timeout_s"].is_null()
                           ? args["timeout_s"]
                           : json(std::min<long>(options_.default_cell_timeout.count(), policy_timeout > 0 ? policy_timeout : 3600));
    // MCP results always have a budget: the model's, or 24 KiB.
    render_limits limits;
    if (args.contains("max_output_tokens") && args["max_output_tokens"].is_number_integer())
        limits.text_bytes = args["max_output_tokens"].get<std::size_t>() * agent::bytes_per_token;
    ask["max_output_bytes"] = std::max<std::size_t>(limits.text_bytes, core::min_budget_bytes);
    auto cell = api::cell_request_from(ask);
    cell.output_at = api::whole_output_at(k->id());
    auto opts = s_.cells->options(*k, cell);
    {
        std::lock_guard lock(call->mutex);
        if (call->cancelled) return;
        call->kernel_id = k->id();
    }
    auto exec = s_.cells->run(
        k, std::move(opts),
        [call](const std::string& event, const json& data) {
            if (event != "stdout" && event != "stderr") return;
            auto text = data.value("text", "");
            while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
            if (const auto nl = text.find_last_of('\n'); nl != std::string::npos) text = text.substr(nl + 1);
            if (text.empty()) return;
            if (text.size() > 200) text = text.substr(0, utf8_complete_length(std::string_view(text).substr(0, 200))) + "…";
            std::lock_guard lock(call->mutex);
            call->last_output = std::move(text);
        },
        [id = k->id(), fresh, limits, done](json result) { done(render_execution(result, id, fresh, limits)); });
    bool cancelled = false;
    {
        std::lock_guard lock(call->mutex);
        call->exec = exec;
        cancelled = call->cancelled;
    }
    if (cancelled) s_.cells->cancel(k->id(), exec);  // cancelled while it was being submitted
}

void server::create_session(const std::string& tenant, const json& args, const done_fn& done) {
    // create_session's arguments are POST /v1/sessions's names, with its rules.
    s_.core->start(api::session_request_from(args, tenant),
                             [self = shared_from_this(), done](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                                 if (e) return done(text_result(failure_text(*e), true));
                                 done(text_result(session_text(*k, self->s_.kernels.specs().find(k->spec_name()))));
                             });
}

void server::snapshot_session(const std::string& tenant, const json& args, const done_fn& done) {
    const auto sid = args["session_id"].get<std::string>();
    const auto k = s_.kernels.find(tenant, sid);
    if (!k) return done(text_result(not_found_text(sid), true));
    s_.kernels.snapshot(k, optional_string(args, "name"), [done](std::optional<kernels::failure> f, kernels::snapshot_record snap) {
        if (f) return done(text_result(failure_text(*f), true));
        done(text_result("snapshot_id: " + snap.id + "\nname: " + snap.name + "\nof session: " + snap.source +
                         "\nkept: its files (" + std::to_string(snap.bytes >> 20) +
                         " MiB workspace); variables are not kept\nStart a session from it: create_session with "
                         "from_snapshot=\"" + snap.id + "\"."));
    });
}

void server::fork_session(const std::string& tenant, const json& args, const done_fn& done) {
    const auto sid = args["session_id"].get<std::string>();
    const auto k = s_.kernels.find(tenant, sid);
    if (!k) return done(text_result(not_found_text(sid), true));
    const std::size_t count = args.contains("count") && args["count"].is_number_integer() ? args["count"].get<std::size_t>() : 1;
    s_.kernels.fork(k, count, "", [done, sid](std::optional<kernels::failure> f, kernels::snapshot_record snap,
                                              std::vector<kernels::kernel_ptr> children) {
        if (f) return done(text_result(failure_text(*f), true));
        std::string t = "Forked session " + sid + " into " + std::to_string(children.size()) +
                        " new session(s), each with its own copy of its files (variables are not carried over):\n";
        for (const auto& c : children) t += "session_id: " + c->id() + "\n";
        t += "snapshot_id: " + snap.id + " (start more from it with create_session from_snapshot)";
        done(text_result(t));
    });
}

void server::close_session(const std::string& tenant, const json& args, const done_fn& done) {
    const auto sid = args["session_id"].get<std::string>();
    const auto k = s_.kernels.find(tenant, sid);
    if (!k) return done(text_result(not_found_text(sid), true));
    s_.sessions.remove_for_kernel(k->id());
    s_.kernels.shutdown(k, [sid, done](std::optional<kernels::failure> e) {
        done(e ? text_result("Could not close session " + sid + ": " + e->message, true) : text_result("closed " + sid));
    }, "closed through MCP");
}

void server::with_session(const std::string& tenant, const json& args, bool create,
                          std::function<void(kernels::kernel_ptr, bool)> then, const done_fn& done) {
    const auto sid = optional_string(args, "session_id");
    if (!sid.empty() || !create) {
        const auto k = s_.kernels.find(tenant, sid);
        if (!k) return done(text_result(not_found_text(sid), true));
        return then(k, false);
    }
    s_.core->start(core::session_for(tenant),
                             [then, done](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                                 if (e) return done(text_result(failure_text(*e), true));
                                 then(k, true);
                             });
}

void server::on_file_pool(const std::string& tenant, const done_fn& done, std::function<json()> work) {
    auto job = [done, work = std::move(work)] {
        try {
            done(work());
        } catch (const api_exception& e) {
            done(text_result(e.what(), true));
        } catch (const contents::contents_error& e) {
            done(text_result(e.what(), true));
        } catch (const std::exception& e) {
            spdlog::error("MCP file tool: {}", e.what());
            done(text_result("Internal error", true));
        }
    };
    if (s_.file_io == nullptr) return job();
    if (s_.file_io->submit(tenant, job) != util::file_io_pool::admission::accepted)
        done(text_result("Too many file operations are waiting; try again shortly", true));
}

void server::write_file(const std::string& tenant, const json& args, const done_fn& done) {
    const auto path = contents::contents_store::check_path(args["path"].get<std::string>());
    if (path.empty()) throw api_exception(400, "'path' must name a file");
    std::string data = args["content"].get<std::string>();
    if (args.value("encoding", "utf-8") == "base64") {
        auto decoded = base64_decode(data);
        if (!decoded) throw api_exception(400, "'content' is not valid base64");
        data = std::move(*decoded);
    }
    with_session(tenant, args, true, [this, tenant, path, data = std::move(data), done](kernels::kernel_ptr k, bool fresh) {
        if (data.size() > k->policy().upload_limit_bytes)
            return done(text_result("The file is larger than the session's upload limit (" +
                                        std::to_string(k->policy().upload_limit_bytes) + " bytes)", true));
        on_file_pool(tenant, done, [k, fresh, path, data] {
            const auto store = core::open_files(k);
            k->touch();
            store->make_parents(path);
            const auto info = store->write(path, data);
            return text_result("wrote " + info.path + " (" + std::to_string(info.size) + " bytes)\nsession_id: " + k->id() +
                               (fresh ? " (a new session: pass this session_id to later calls)" : "") + "\n");
        });
    }, done);
}

void server::read_file(const std::string& tenant, const json& args, const done_fn& done) {
    const auto path = contents::contents_store::check_path(args["path"].get<std::string>());
    const auto max_bytes = std::min<std::size_t>(args.contains("max_bytes") ? args["max_bytes"].get<std::size_t>() : default_read_bytes,
                                                 max_read_bytes);
    with_session(tenant, args, false, [this, tenant, path, max_bytes, done](kernels::kernel_ptr k, bool) {
        on_file_pool(tenant, done, [k, path, max_bytes] {
            const auto store = core::open_files(k);
            k->touch();
            const auto info = store->stat(path);
            if (info.type == contents::entry_type::directory)
                return text_result(path + " is a directory: use list_files", true);
            const std::string mime(contents::mime_type_for(info.name));
            const auto uri = file_uri(k->id(), info.path);
            const bool image = mime == "image/png" || mime == "image/jpeg" || mime == "image/gif" || mime == "image/webp";
            if (image && info.size <= max_image_read_bytes) {
                const auto bytes = store->read(path, max_image_read_bytes);
                json caption = {{"type", "text"}, {"text", info.path + " (" + std::to_string(info.size) + " bytes, " + mime + ")"}};
                json picture = {{"type", "image"}, {"data", base64_encode(bytes)}, {"mimeType", mime}};
                return json{{"content", json::array({std::move(caption), std::move(picture)})}};
            }
            std::string head;
            if (!image) {
                std::uint64_t size = 0;
                const int fd = store->open_for_read(path, size);
                head.resize(std::min<std::uint64_t>(size, max_bytes));
                std::size_t got = 0;
                while (got < head.size()) {
                    const auto n = ::read(fd, head.data() + got, head.size() - got);
                    if (n <= 0) break;
                    got += static_cast<std::size_t>(n);
                }
                ::close(fd);
                head.resize(got);
            }
            const auto whole = utf8_complete_length(head);
            if (!image && !has_control_bytes(head) && is_valid_utf8(std::string_view(head).substr(0, whole))) {
                head.resize(whole);
                if (info.size > head.size())
                    head += "\n… [" + std::to_string(info.size - head.size()) + " more bytes; raise max_bytes or read it as " + uri + "]";
                return text_result(head);
            }
            json summary = {{"type", "text"},
                            {"text", info.path + ": " + std::to_string(info.size) + " bytes of " + mime + " (not text" +
                                         (image ? ", too large to send as an image" : "") + "); read it as the resource " + uri}};
            json link = {{"type", "resource_link"}, {"uri", uri}, {"name", info.path}, {"mimeType", mime}, {"size", info.size}};
            return json{{"content", json::array({std::move(summary), std::move(link)})}};
        });
    }, done);
}

void server::list_files(const std::string& tenant, const json& args, const done_fn& done) {
    const auto dir = contents::contents_store::check_path(optional_string(args, "path"));
    with_session(tenant, args, false, [this, tenant, dir, done](kernels::kernel_ptr k, bool) {
        on_file_pool(tenant, done, [k, dir] {
            const auto store = core::open_files(k);
            k->touch();
            const auto listed = store->list(dir, max_listed);
            std::string t = "path: /" + dir + "\n";
            for (const auto& e : listed.entries) {
                const bool is_dir = e.type == contents::entry_type::directory;
                t += (is_dir ? "dir   " : "file  ") + e.path + (is_dir ? "/" : "  " + std::to_string(e.size) + " bytes") +
                     "  " + kernels::iso8601(std::chrono::system_clock::time_point(
                                std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(e.mtime_ns)))) +
                     "\n";
            }
            if (listed.entries.empty()) t += "(empty)\n";
            if (listed.truncated) t += "[more entries than the " + std::to_string(max_listed) + " listed]\n";
            return text_result(t);
        });
    }, done);
}

void server::read_resource(const request_ptr& req, const json& id, const json& params, const reply_fn& reply) {
    const auto uri = params.contains("uri") && params["uri"].is_string() ? params["uri"].get<std::string>() : std::string();
    const auto ref = parse_file_uri(uri);
    if (!ref) return reply(rpc_error(200, id, invalid_params, "Not a cellgate resource URI: " + uri.substr(0, 200)));
    const auto k = s_.kernels.find(req->who.tenant, ref->session_id);
    if (!k) return reply(rpc_error(200, id, resource_not_found, "Resource not found: " + uri.substr(0, 200)));
    on_file_pool(req->who.tenant,
                 [reply, id, uri](json r) {
                     if (r.value("isError", false))
                         return reply(rpc_error(200, id, resource_not_found,
                                                "Resource not found: " + r["content"][0].value("text", "")));
                     reply(rpc_reply(200, rpc_message(id, std::move(r))));
                 },
                 [k, ref, uri] {
                     const auto store = core::open_files(k);
                     const auto path = contents::contents_store::check_path(ref->path);
                     const auto info = store->stat(path);
                     const std::string mime(contents::mime_type_for(info.name));
                     const auto data = store->read(path, max_read_bytes);
                     json item = {{"uri", uri}, {"mimeType", mime}};
                     if (!has_control_bytes(data) && is_valid_utf8(data)) item["text"] = data;
                     else item["blob"] = base64_encode(data);
                     return json{{"contents", json::array({item})}};
                 });
}

}  // namespace

std::shared_ptr<void> register_mcp_api(router& r, api::services& s, agent::agent_service& agents,
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
