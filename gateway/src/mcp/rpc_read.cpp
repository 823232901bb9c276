#include "mcp/rpc_read.hpp"

#include "cellgate/protocol/json_check.hpp"

namespace cellgate::mcp {

namespace {

// The JSON-RPC codes (as mcp/server.hpp names them).
constexpr int parse_error = -32700, invalid_request = -32600;
constexpr std::size_t max_depth = 512;  // as every request body (http::max_body_json_depth)

}  // namespace

rpc_read read_rpc(std::string_view body) {
    using nlohmann::json;
    rpc_read r;
    auto refuse = [&r](unsigned status, int code, std::string why) {
        r.status = status, r.code = code, r.error = std::move(why);
        return r;
    };
    if (!protocol::json_nesting_within(body, max_depth)) return refuse(400, parse_error, "Parse error: the body is nested too deeply");
    auto msg = json::parse(body, nullptr, false);
    if (msg.is_discarded()) return refuse(400, parse_error, "Parse error: the body is not JSON");
    if (msg.is_array())
        return refuse(400, invalid_request,
                      "Batches are not supported: send one JSON-RPC message per POST (MCP 2025-06-18 and later)");
    if (!msg.is_object() || msg.value("jsonrpc", json()) != "2.0") return refuse(400, invalid_request, "Not a JSON-RPC 2.0 message");
    r.has_method = msg.contains("method") && msg["method"].is_string();
    r.has_id = msg.contains("id") && (msg["id"].is_string() || msg["id"].is_number_integer());
    if (msg.contains("id") && !r.has_id) return refuse(400, invalid_request, "A request id must be a string or an integer");
    if (r.has_id) r.id = msg["id"];
    if (!r.has_method && !(r.has_id && (msg.contains("result") || msg.contains("error"))))
        return refuse(400, invalid_request, "A request needs a 'method'");
    r.message = std::move(msg);
    return r;
}

}  // namespace cellgate::mcp
