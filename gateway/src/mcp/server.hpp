#pragma once

// The MCP server's parts, shared by its two halves: the transport and the
// JSON-RPC protocol (mcp_api.cpp: the guard, POST/DELETE /mcp, initialize,
// notifications, tools/call's bookkeeping and cancellation) and the tools'
// calls (tool_calls.cpp: each tool over the core, files, resources/read).
// Internal to the mcp room; mcp_api.hpp is what the gateway sees.

#include "agent/agent_service.hpp"
#include "kit/services.hpp"
#include "mcp/mcp_api.hpp"
#include "mcp/mcp_sessions.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace cellgate::mcp {

using nlohmann::json;
using http::reply_fn;
using http::request_ptr;

inline constexpr std::size_t default_read_bytes = 64u << 10, max_read_bytes = 8u << 20;
inline constexpr std::size_t max_image_read_bytes = 2u << 20;
inline constexpr std::size_t max_listed = 1000;

// JSON-RPC error codes (none in -32020…-32099: a 2026 client reads those as
// modern-era errors).
inline constexpr int parse_error = -32700, invalid_request = -32600, method_not_found = -32601, invalid_params = -32602,
              session_not_found = -32001, resource_not_found = -32002, request_cancelled = -32800;

// JSON-RPC messages and the HTTP answers that carry them.
json rpc_message(const json& id, json result);
json rpc_error_message(const json& id, int code, const std::string& message);
http::response rpc_reply(unsigned status, const json& message);
http::response rpc_error(unsigned status, const json& id, int code, const std::string& message);

// How a tool's failure reads to a model.
std::string failure_text(const kernels::failure& f);
std::string not_found_text(const std::string& id);
std::string session_text(const kernels::kernel& k, const kernels::kernelspec* spec);
// A string argument, "" when absent or null.
std::string optional_string(const json& args, const char* key);

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
    server(kit::services& s, agent::agent_service& agents, kernels::state_store* store, mcp_options options)
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

    kit::services& s_;
    agent::agent_service& agents_;
    mcp_options options_;
    mcp_sessions sessions_;
    std::mutex mutex_;
    std::map<std::string, std::weak_ptr<call_state>> calls_;  // by MCP session id + request id
    std::map<std::string, std::size_t> calls_per_tenant_;
};

}  // namespace cellgate::mcp
