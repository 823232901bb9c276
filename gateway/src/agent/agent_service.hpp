#pragma once

#include "agent/execution.hpp"
#include "agent/ledger.hpp"
#include "kernels/cell_summary.hpp"
#include "kernels/kernel_manager.hpp"

#include <boost/asio/thread_pool.hpp>

#include <deque>
#include <map>
#include <memory>
#include <mutex>

namespace cellgate::agent {

// Server defaults and maxima for agent sessions; a request may lower or raise
// a limit up to the maximum.
struct agent_limits {
    kernels::kernel_policy defaults{.exec_timeout = std::chrono::seconds(300), .idle_timeout = std::chrono::seconds(600),
                                    .lifetime = std::chrono::seconds(86400), .output_limit_bytes = 1u << 20,
                                    .result_limit_bytes = 32u << 20, .upload_limit_bytes = 256u << 20};
    kernels::kernel_policy maxima{.exec_timeout = std::chrono::seconds(3600), .idle_timeout = std::chrono::seconds(86400),
                                  .lifetime = std::chrono::seconds(7 * 86400), .output_limit_bytes = 64u << 20,
                                  .result_limit_bytes = 256u << 20, .upload_limit_bytes = 4ull << 30};
};

// Runs agent executions one at a time per session, in arrival order.
class agent_service {
public:
    // Workspace snapshots run on `file_io` (on the executions' strands when null).
    // Each execution's record goes to the ledger (kept in `store` when given).
    agent_service(boost::asio::io_context& ioc, kernels::kernel_manager& manager, agent_limits limits,
                  util::file_io_pool* file_io = nullptr, kernels::state_store* store = nullptr,
                  std::filesystem::path spool_root = {});

    // Its ledger record is tagged with options.surface, the door it came through.
    std::shared_ptr<execution> submit(const kernels::kernel_ptr& k, execution_options options,
                                      execution::event_fn on_event, execution::done_fn on_done);
    // The client went away: a queued execution is dropped, a running one interrupted.
    void cancel(const std::string& kernel_id, const std::shared_ptr<execution>& e);

    const agent_limits& limits() const noexcept { return limits_; }
    execution_ledger& ledger() noexcept { return ledger_; }
    // What a session's code did on the network while an execution ran
    // (session, from and to in Unix ms) → the ledger record's "egress", or
    // null for a session without a network. Set before the first execution.
    using egress_summary_fn = std::function<nlohmann::json(const std::string&, std::int64_t, std::int64_t)>;
    void set_egress_summary(egress_summary_fn f) { egress_summary_ = std::move(f); }
    // Where a session's budgeted outputs (whole stdout/stderr, original
    // images) are kept, for its life; empty: nowhere (no output handles).
    std::filesystem::path spool_dir(const std::string& kernel_id) const;
    // At most this much spool per session: the oldest executions' files go first.
    static constexpr std::uint64_t max_spool_per_session = 256ull << 20;
    kernels::kernel_manager& kernels() noexcept { return manager_; }
    boost::asio::io_context& io() noexcept { return ioc_; }

    // A cell that ran in a session without this service (a Jupyter WebSocket
    // client's, an E2B code context's: kernels/cell_summary.hpp): at its
    // start the sandbox's peak is reset and its usage read, at its end read
    // again and the cell recorded, with the fields a /v1 execution's record
    // has. The cgroup is read on a thread of the service's own, in arrival
    // order; this only queues. Its workspace is not snapshotted: "files" is
    // empty and "files_complete" false. A cell that ends as its session goes
    // is not recorded (the session's records go with it).
    void record_cell(const kernels::kernel& k, kernels::cell_summary cell);
    // Readings at cells' starts kept for their ends (a cell whose end never
    // comes leaves one until its session goes; past this one is dropped).
    static constexpr std::size_t max_cells_running = 1024;

private:
    egress_summary_fn egress_summary_;
    struct session_queue {
        std::deque<std::shared_ptr<execution>> pending;
        std::shared_ptr<execution> running;
    };
    void start_next_locked(const std::string& kernel_id);
    void done(const std::string& kernel_id);

    boost::asio::io_context& ioc_;
    kernels::kernel_manager& manager_;
    agent_limits limits_;
    util::file_io_pool* file_io_;
    execution_ledger ledger_;
    std::filesystem::path spool_root_;
    std::mutex mutex_;
    std::map<std::string, session_queue> queues_;
    // Only on cells_: the usage read at each running cell's start, by
    // "<session>\n<context>\n<cell id>".
    std::map<std::string, std::optional<launcher::sandbox_usage>> cell_starts_;
    boost::asio::thread_pool cells_{1};  // last: stopped first, before what its jobs use
};

}  // namespace cellgate::agent
