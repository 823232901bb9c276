#pragma once

// MCP sessions (Mcp-Session-Id): what initialize negotiated, per tenant. An
// MCP session holds no kernel — tools name their sandbox sessions by
// session_id arguments — so it is only a record: its id (32 random bytes),
// tenant, protocol version and client. Records live in memory and, with a
// state store, in the gateway's database, so a client keeps its session
// across a gateway restart (the official TypeScript client does not
// initialize again after a 404). Bounded per tenant (least recently used
// goes) and ended after an idle limit.

#include "kernels/state_store.hpp"

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace cellgate::mcp {

using sys_clock = std::chrono::system_clock;

struct mcp_session {
    std::string id, tenant, protocol_version, client_name, client_version;
    sys_clock::time_point created, last_used;
};

class mcp_sessions {
public:
    mcp_sessions(kernels::state_store* store, std::size_t max_per_tenant, std::chrono::seconds idle_limit);

    // A new session; past the tenant's cap its least recently used one ends.
    mcp_session open(const std::string& tenant, const std::string& protocol_version, const std::string& client_name,
                     const std::string& client_version);
    // The tenant's live session (used now), or nothing: another tenant's,
    // an ended or an idle-expired one is not there.
    std::optional<mcp_session> use(const std::string& tenant, const std::string& id);
    bool close(const std::string& tenant, const std::string& id);
    // Takes back the records an earlier run stored (the expired ones go).
    void load();
    std::size_t size() const;

private:
    void save(const mcp_session& s);
    void forget_locked(const std::string& id);

    kernels::state_store* store_;
    std::size_t max_per_tenant_;
    std::chrono::seconds idle_limit_;
    mutable std::mutex mutex_;
    std::map<std::string, mcp_session> sessions_;
    std::map<std::string, sys_clock::time_point> saved_use_;  // last_used as stored
};

}  // namespace cellgate::mcp
