#pragma once

// The ledger: one record per cell a session runs — an execution of the agent
// API (and of the surfaces over it: E2B, MCP), a Jupyter WebSocket client's
// cell, an E2B code context's (agent_service::record_cell); its "surface"
// says which — what it ran (the code's SHA-256), when, its status,
// the CPU time and memory peak of the sandbox's cgroup during the cell, the
// bytes it produced and the files it created, modified or deleted. Kept per
// session for the session's life (the newest max_per_session), in memory
// and, with a state store, in the gateway's database (removed with the
// session), so records survive a gateway restart. Counters for /metrics.

#include "cellgate/launcher/sandbox_launcher.hpp"
#include "kernels/state_store.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace cellgate::agent {

// A cell's code as its record keeps it: the SHA-256, in hex.
std::string code_sha256(std::string_view code);
// What the sandbox's cgroup says a cell cost, into its record: cpu_s (every
// task in the cgroup: the kernel, its threads and children, gVisor's sentry
// under runsc), the cgroup's memory peak and its rise above the use at the
// cell's start, and the use at start and end. Nothing without both readings.
void record_usage(nlohmann::json& record, const std::optional<launcher::sandbox_usage>& before,
                  const std::optional<launcher::sandbox_usage>& after);

class execution_ledger {
public:
    explicit execution_ledger(kernels::state_store* store = nullptr, std::size_t max_per_session = 1000);

    // Adds a record (an execution result's "usage"); it gets the session's next "seq".
    void record(nlohmann::json usage);

    struct page {
        std::vector<nlohmann::json> records;  // ascending seq
        std::optional<std::uint64_t> next_after;  // pass as `after` for the next page
    };
    // Records with seq > after, oldest first, at most `limit`.
    page list(const std::string& session_id, std::uint64_t after, std::size_t limit) const;
    std::optional<nlohmann::json> find(const std::string& session_id, const std::string& execution_id) const;
    // The session has gone (its stored rows go with its kernel).
    void forget_session(const std::string& session_id);
    // Takes back the records an earlier run stored, for the sessions it kept.
    void load();
    // Prometheus text: executions by status, CPU and wall seconds in all.
    void render_metrics(std::string& out) const;

private:
    struct session_records {
        std::uint64_t next_seq = 1;
        std::deque<nlohmann::json> records;
    };
    void count(const nlohmann::json& r);

    kernels::state_store* store_;
    std::size_t max_per_session_;
    mutable std::mutex mutex_;
    std::map<std::string, session_records> sessions_;
    std::map<std::string, std::uint64_t> by_status_;
    double cpu_seconds_ = 0, wall_seconds_ = 0;
    std::uint64_t peak_memory_max_ = 0;
};

}  // namespace cellgate::agent
