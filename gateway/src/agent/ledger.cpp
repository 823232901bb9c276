#include "agent/ledger.hpp"

#include "util/encoding.hpp"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace cellgate::agent {

using nlohmann::json;

namespace {
constexpr const char* record_kind = "execution";
}

std::string code_sha256(std::string_view code) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_Digest(code.data(), code.size(), out, &len, EVP_sha256(), nullptr);
    return hex_encode(std::string_view(reinterpret_cast<const char*>(out), len));
}

void record_usage(json& r, const std::optional<launcher::sandbox_usage>& before,
                  const std::optional<launcher::sandbox_usage>& after) {
    if (!before || !after) return;
    if (after->cpu_ns >= before->cpu_ns) r["cpu_s"] = static_cast<double>(after->cpu_ns - before->cpu_ns) / 1e9;
    // The peak is the cgroup's (the kernel's baseline, page cache and all);
    // its rise above the use at the cell's start is what the cell added.
    if (before->peak_resettable) {
        r["peak_memory_bytes"] = after->memory_peak_bytes;
        r["peak_memory_increase_bytes"] =
            after->memory_peak_bytes > before->memory_bytes ? after->memory_peak_bytes - before->memory_bytes : 0;
    }
    r["memory_bytes_at_start"] = before->memory_bytes;
    r["memory_bytes_at_end"] = after->memory_bytes;
}

execution_ledger::execution_ledger(kernels::state_store* store, std::size_t max_per_session)
    : store_(store), max_per_session_(std::max<std::size_t>(max_per_session, 1)) {}

void execution_ledger::record(json usage) {
    const auto session = usage.value("session_id", "");
    if (session.empty() || !usage.contains("execution_id")) return;
    std::optional<std::string> evicted;
    {
        std::lock_guard lock(mutex_);
        auto& s = sessions_[session];
        usage["seq"] = s.next_seq++;
        s.records.push_back(usage);
        if (s.records.size() > max_per_session_) {
            evicted = s.records.front().value("execution_id", "");
            s.records.pop_front();
        }
        count(usage);
    }
    if (store_ == nullptr) return;
    store_->put_record({record_kind, usage["execution_id"].get<std::string>(), session, usage});
    if (evicted) store_->remove_record(record_kind, *evicted);
}

void execution_ledger::count(const json& r) {
    ++by_status_[r.value("status", "unknown")];
    if (r.contains("cpu_s") && r["cpu_s"].is_number()) cpu_seconds_ += r["cpu_s"].get<double>();
    if (r.contains("wall_ms") && r["wall_ms"].is_number()) wall_seconds_ += r["wall_ms"].get<double>() / 1000.0;
    if (r.contains("peak_memory_bytes") && r["peak_memory_bytes"].is_number_unsigned())
        peak_memory_max_ = std::max(peak_memory_max_, r["peak_memory_bytes"].get<std::uint64_t>());
}

execution_ledger::page execution_ledger::list(const std::string& session_id, std::uint64_t after, std::size_t limit) const {
    page p;
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return p;
    for (const auto& r : it->second.records) {
        if (r["seq"].get<std::uint64_t>() <= after) continue;
        if (p.records.size() == limit) {
            p.next_after = p.records.back()["seq"].get<std::uint64_t>();
            break;
        }
        p.records.push_back(r);
    }
    return p;
}

std::optional<json> execution_ledger::find(const std::string& session_id, const std::string& execution_id) const {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return std::nullopt;
    for (const auto& r : it->second.records)
        if (r.value("execution_id", "") == execution_id) return r;
    return std::nullopt;
}

void execution_ledger::forget_session(const std::string& session_id) {
    std::lock_guard lock(mutex_);
    sessions_.erase(session_id);
}

void execution_ledger::load() {
    if (store_ == nullptr) return;
    auto rows = store_->records(record_kind);
    std::lock_guard lock(mutex_);
    std::map<std::string, std::vector<json>> by_session;
    for (auto& r : rows) {
        if (!r.body.is_object() || !r.body.contains("seq") || !r.body["seq"].is_number_unsigned()) continue;
        by_session[r.kernel_id].push_back(std::move(r.body));
    }
    std::size_t n = 0;
    for (auto& [session, records] : by_session) {
        std::sort(records.begin(), records.end(),
                  [](const json& a, const json& b) { return a["seq"].get<std::uint64_t>() < b["seq"].get<std::uint64_t>(); });
        auto& s = sessions_[session];
        for (auto& r : records) {
            s.next_seq = std::max(s.next_seq, r["seq"].get<std::uint64_t>() + 1);
            s.records.push_back(std::move(r));
            ++n;
        }
    }
    if (n > 0) spdlog::info("took back {} execution record(s) of {} session(s)", n, by_session.size());
}

void execution_ledger::render_metrics(std::string& out) const {
    std::lock_guard lock(mutex_);
    out += "# HELP cellgate_ledger_executions_total Executions recorded in the ledger, by status.\n"
           "# TYPE cellgate_ledger_executions_total counter\n";
    for (const auto& [status, n] : by_status_)
        out += "cellgate_ledger_executions_total{status=\"" + status + "\"} " + std::to_string(n) + "\n";
    out += "# HELP cellgate_ledger_cpu_seconds_total CPU seconds of sandboxes during recorded executions.\n"
           "# TYPE cellgate_ledger_cpu_seconds_total counter\n"
           "cellgate_ledger_cpu_seconds_total " + std::to_string(cpu_seconds_) + "\n";
    out += "# HELP cellgate_ledger_wall_seconds_total Wall seconds of recorded executions.\n"
           "# TYPE cellgate_ledger_wall_seconds_total counter\n"
           "cellgate_ledger_wall_seconds_total " + std::to_string(wall_seconds_) + "\n";
    out += "# HELP cellgate_ledger_peak_memory_bytes_max The highest memory peak of a recorded execution.\n"
           "# TYPE cellgate_ledger_peak_memory_bytes_max gauge\n"
           "cellgate_ledger_peak_memory_bytes_max " + std::to_string(peak_memory_max_) + "\n";
}

}  // namespace cellgate::agent
