#include "agent/agent_service.hpp"

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
    const std::string tenant = k->tenant();
    options.file_io = file_io_;
    auto e = std::make_shared<execution>(ioc_, manager_, k, std::move(options), std::move(on_event),
                                         [this, id, tenant, on_done = std::move(on_done)](nlohmann::json result) {
                                             if (result.contains("usage")) {
                                                 auto& usage = result["usage"];
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
