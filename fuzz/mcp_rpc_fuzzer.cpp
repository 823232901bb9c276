// libFuzzer target: an MCP POST body (mcp/rpc_read.hpp) and, when it is a
// tools/call, its arguments against every tool's schema (mcp/tools.hpp),
// and the resource URIs the server reads (parse_file_uri). Beyond "no
// crash": a refusal always says why with a JSON-RPC code; an accepted
// message is an object with "jsonrpc": "2.0" and an id of the allowed kinds.

#include "mcp/rpc_read.hpp"
#include "mcp/tools.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace cellgate::mcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    const auto r = read_rpc(body);
    if (r.status != 0) {
        if (r.error.empty() || r.code >= 0 || (r.status != 400)) __builtin_trap();
    } else {
        const auto& m = r.message;
        if (!m.is_object() || m.value("jsonrpc", nlohmann::json()) != "2.0") __builtin_trap();
        if (r.has_id && !(m["id"].is_string() || m["id"].is_number_integer())) __builtin_trap();
        if (!r.has_method && !r.has_id) __builtin_trap();
        if (r.has_method && m["method"] == "tools/call" && m.contains("params") && m["params"].is_object()) {
            const auto& p = m["params"];
            const auto args = p.contains("arguments") ? p["arguments"] : nlohmann::json::object();
            if (p.contains("name") && p["name"].is_string()) {
                const auto name = p["name"].get<std::string>();
                if (is_tool(name)) (void)check_arguments(name, args);
            }
            for (const auto* tool : {"execute_code", "create_session", "snapshot_session", "fork_session",
                                     "close_session", "list_sessions", "write_file", "read_file", "list_files"})
                if (is_tool(tool)) (void)check_arguments(tool, args);
        }
        if (r.has_method && m["method"] == "resources/read" && m.contains("params") && m["params"].is_object() &&
            m["params"].contains("uri") && m["params"]["uri"].is_string())
            (void)parse_file_uri(m["params"]["uri"].get<std::string>());
    }
    (void)parse_file_uri(body.substr(0, 4096));
    return 0;
}
