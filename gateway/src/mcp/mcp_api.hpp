#pragma once

// The MCP endpoint: Streamable HTTP (protocol revisions 2025-11-25 and
// 2025-06-18) at /mcp on the gateway's own port, with the tools of
// mcp/tools.hpp over the same sessions, executions and workspaces the /v1
// API uses. docs/mcp.md has the contract; ../shared/research/mcp.md the
// study it follows.
//
//   POST   /mcp   one JSON-RPC message; a request is answered as
//                 application/json, or as text/event-stream for execute_code
//                 (progress notifications, then the response)
//   GET    /mcp   405: the server has nothing to push
//   DELETE /mcp   ends the MCP session named by Mcp-Session-Id
//
// Every request carries Authorization: Bearer <tenant token> (401 with
// WWW-Authenticate otherwise); a foreign Origin gets 403.

#include "kit/services.hpp"
#include "kernels/state_store.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace cellgate::agent { class agent_service; }

namespace cellgate::mcp {

struct mcp_options {
    std::vector<std::string> allow_origins;        // beside the gateway's own origin (--allow-origin)
    std::string version = "2.0.0";                 // serverInfo.version
    std::size_t max_sessions_per_tenant = 1000;    // MCP sessions; the least recently used goes
    std::chrono::seconds session_idle{86400};      // an MCP session unused this long ends
    std::size_t max_calls_per_tenant = 32;         // tools/call in flight at once
    std::chrono::seconds default_cell_timeout{50}; // under the 60 s most MCP clients wait
    std::chrono::milliseconds progress_interval{2000};
};

// Adds the routes; the handlers refer to what the returned handle holds,
// which the caller keeps as long as the router.
[[nodiscard]] std::shared_ptr<void> register_mcp_api(http::router& r, kit::services& s, agent::agent_service& agents,
                                                     kernels::state_store* store, const mcp_options& options);

}  // namespace cellgate::mcp
