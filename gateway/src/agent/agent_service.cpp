#include "agent/agent_service.hpp"

#include "cellgate/protocol/message.hpp"
#include "util/encoding.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace cellgate::agent {

agent_service::agent_service(boost::asio::io_context& ioc, kernels::kernel_manager& manager, agent_limits limits,
                             util::file_io_pool* file_io, kernels::state_store* store,
                             std::filesystem::path spool_root)
    : ioc_(ioc), manager_(manager), limits_(limits), file_io_(file_io), ledger_(store), spool_root_(std::move(spool_root)) {
    ledger_.load();
    // Executions waiting on a session that goes away finish at once.
    manager_.on_removed([this](const std::string& kernel_id) {
        ledger_.forget_session(kernel_id);
        boost::asio::post(cells_, [this, prefix = kernel_id + "\n"] {
            for (auto it = cell_starts_.lower_bound(prefix); it != cell_starts_.end() && it->first.starts_with(prefix);)
                it = cell_starts_.erase(it);
        });
        if (!spool_root_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(spool_dir(kernel_id), ec);
        }
        std::deque<std::shared_ptr<execution>> orphans;
        {
            std::lock_guard lock(mutex_);
            const auto it = queues_.find(kernel_id);
            if (it == queues_.end()) return;
            orphans.swap(it->second.pending);
        }
        for (auto& e : orphans) e->kernel_closed("the session ended before this execution started");
    });
}

std::filesystem::path agent_service::spool_dir(const std::string& kernel_id) const {
    return spool_root_.empty() ? std::filesystem::path() : spool_root_ / kernel_id;
}

namespace {

// Keeps a session's spool within its cap: the oldest files go first.
void trim_spool(const std::filesystem::path& dir, std::uint64_t cap) {
    std::error_code ec;
    std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> files;
    std::uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        if (!e.is_regular_file(ec)) continue;
        total += e.file_size(ec);
        files.emplace_back(e.last_write_time(ec), e.path());
    }
    if (total <= cap) return;
    std::sort(files.begin(), files.end());
    for (const auto& [when, path] : files) {
        if (total <= cap) break;
        const auto size = std::filesystem::file_size(path, ec);
        if (std::filesystem::remove(path, ec)) total -= std::min(total, size);
    }
}

}  // namespace

std::shared_ptr<execution> agent_service::submit(const kernels::kernel_ptr& k, execution_options options,
                                                 execution::event_fn on_event, execution::done_fn on_done) {
    const std::string id = k->id();
    auto surface = options.surface;
    const std::string tenant = k->tenant();
    options.file_io = file_io_;
    auto e = std::make_shared<execution>(ioc_, manager_, k, std::move(options), std::move(on_event),
                                         [this, id, tenant, surface = std::move(surface),
                                                          on_done = std::move(on_done)](nlohmann::json result) {
                                             if (result.contains("usage")) {
                                                 auto& usage = result["usage"];
                                                 usage["surface"] = surface;
                                                 if (egress_summary_) {
                                                     const auto to = std::chrono::duration_cast<std::chrono::milliseconds>(
                                                         std::chrono::system_clock::now().time_since_epoch()).count();
                                                     const auto from = to - usage.value("wall_ms", std::int64_t{0});
                                                     if (auto n = egress_summary_(id, from, to); !n.is_null()) usage["egress"] = std::move(n);
                                                 }
                                                 ledger_.record(usage);
                                             }
                                             if (result.contains("budget") && !spool_root_.empty()) {
                                                 auto trim = [dir = spool_dir(id)] { trim_spool(dir, max_spool_per_session); };
                                                 if (file_io_ == nullptr || file_io_->submit(tenant, trim) != util::file_io_pool::admission::accepted) trim();
                                             }
                                             on_done(std::move(result));
                                             done(id);
                                         });
    std::lock_guard lock(mutex_);
    auto& q = queues_[id];
    q.pending.push_back(e);
    if (!q.running) start_next_locked(id);
    return e;
}

void agent_service::start_next_locked(const std::string& kernel_id) {
    auto& q = queues_[kernel_id];
    if (q.pending.empty()) {
        queues_.erase(kernel_id);
        return;
    }
    q.running = std::move(q.pending.front());
    q.pending.pop_front();
    q.running->start();
}

void agent_service::done(const std::string& kernel_id) {
    std::lock_guard lock(mutex_);
    const auto it = queues_.find(kernel_id);
    if (it == queues_.end()) return;
    it->second.running.reset();
    start_next_locked(kernel_id);
}

namespace {

std::int64_t unix_ms(std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// A cell's record, with a /v1 execution's fields (execution.cpp's usage_record).
nlohmann::json cell_record(const std::string& kernel_id, const kernels::cell_summary& s,
                           std::chrono::system_clock::time_point started, std::chrono::system_clock::time_point ended,
                           const std::optional<launcher::sandbox_usage>& before,
                           const std::optional<launcher::sandbox_usage>& after) {
    using nlohmann::json;
    json r = {{"execution_id", protocol::make_uuid()},
              {"session_id", kernel_id},
              {"surface", s.surface},
              {"code_sha256", s.code ? json(code_sha256(*s.code)) : json(nullptr)},
              {"code_bytes", s.code_bytes},
              {"started_at", kernels::iso8601(started)},
              {"ended_at", kernels::iso8601(ended)},
              {"wall_ms", std::chrono::duration_cast<std::chrono::milliseconds>(s.ended_at - s.started).count()},
              {"status", s.status},
              {"cpu_s", nullptr},
              {"peak_memory_bytes", nullptr},
              {"stdout_bytes", s.stdout_bytes},
              {"stderr_bytes", s.stderr_bytes},
              {"result_bytes", s.result_bytes},
              {"results", s.results},
              {"files", {{"created", json::array()}, {"modified", json::array()}, {"deleted", json::array()}}},
              {"files_complete", false},
              {"egress", json::array()},
              {"output_truncated", s.output_truncated},
              {"results_truncated", s.results_truncated},
              {"kernel_restarted", s.kernel_restarted}};
    // Where it came from: a Jupyter request's msg_id (the client's name for
    // it, up to 128 bytes), an E2B context's id.
    if (s.surface == "jupyter") r["msg_id"] = s.id.substr(0, 128);
    if (!s.context.empty()) r["context_id"] = s.context;
    if (!s.error_name.empty()) r["error_name"] = s.error_name.substr(0, 128);
    record_usage(r, before, after);
    return r;
}

}  // namespace

void agent_service::record_cell(const kernels::kernel& k, kernels::cell_summary cell) {
    const std::string kernel_id = k.id();
    auto key = kernel_id + "\n" + cell.context + "\n" + cell.id;
    if (!cell.ended) {
        // The peak is reset as the cell starts, so its record sees its own;
        // the cell already runs, so its first moments may go uncounted.
        boost::asio::post(cells_, [this, kernel_id, key = std::move(key)]() mutable {
            auto usage = manager_.sandbox_usage(kernel_id, true);
            if (cell_starts_.size() >= max_cells_running) cell_starts_.erase(cell_starts_.begin());
            cell_starts_[std::move(key)] = usage;
        });
        return;
    }
    // The wall clock of its steady times, as near to them as can be.
    const auto steady_now = std::chrono::steady_clock::now();
    const auto ended = std::chrono::system_clock::now() -
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(steady_now - cell.ended_at);
    const auto started = ended - std::chrono::duration_cast<std::chrono::system_clock::duration>(cell.ended_at - cell.started);
    boost::asio::post(cells_, [this, kernel_id, tenant = k.tenant(), key = std::move(key), cell = std::move(cell), started,
                               ended] {
        if (!manager_.find(tenant, kernel_id)) {  // gone: its records were forgotten
            cell_starts_.erase(key);
            return;
        }
        std::optional<launcher::sandbox_usage> before, after;
        // No reading at its start (it came after the end, or it was dropped): no CPU or memory.
        if (const auto it = cell_starts_.find(key); it != cell_starts_.end()) {
            before = it->second;
            cell_starts_.erase(it);
            if (before) after = manager_.sandbox_usage(kernel_id, false);
        }
        try {
            auto r = cell_record(kernel_id, cell, started, ended, before, after);
            if (egress_summary_)
                if (auto n = egress_summary_(kernel_id, unix_ms(started), unix_ms(ended)); !n.is_null()) r["egress"] = std::move(n);
            ledger_.record(std::move(r));
        } catch (const std::exception& e) {
            spdlog::warn("session {}: a {} cell was not recorded: {}", kernel_id, cell.surface, e.what());
        }
    });
}

void agent_service::cancel(const std::string& kernel_id, const std::shared_ptr<execution>& e) {
    {
        std::lock_guard lock(mutex_);
        const auto it = queues_.find(kernel_id);
        if (it != queues_.end()) {
            auto& pending = it->second.pending;
            const auto pos = std::find(pending.begin(), pending.end(), e);
            if (pos != pending.end()) {
                pending.erase(pos);
                return;
            }
        }
    }
    e->cancel();
}

}  // namespace cellgate::agent
