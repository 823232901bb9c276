#include "core/egress_log_writer.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <vector>

namespace cellgate::core {

namespace {

constexpr std::size_t max_batch = 512;

}  // namespace

std::string egress_log_record_id(const std::string& kernel_id, std::uint64_t seq) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%012llu", static_cast<unsigned long long>(seq));
    return kernel_id + "/" + buf;
}

egress_log_writer::egress_log_writer(kernels::state_store& store, std::size_t keep, std::size_t max_queued)
    : store_(store), keep_(keep), max_queued_(max_queued), thread_([this] { run(); }) {}

egress_log_writer::~egress_log_writer() { stop(); }

bool egress_log_writer::add(const std::string& session, const egress::connection_record& rec) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_ || queue_.size() >= max_queued_) {
            ++dropped_;
            return false;
        }
        queue_.emplace_back(session, rec);
    }
    wake_.notify_one();
    return true;
}

void egress_log_writer::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
}

void egress_log_writer::flush() {
    std::unique_lock lock(mutex_);
    drained_.wait(lock, [&] { return (queue_.empty() && !busy_) || !thread_.joinable(); });
}

void egress_log_writer::run() {
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping, and all written
        std::vector<kernels::state_store::surface_record> puts;
        std::vector<std::pair<std::string, std::string>> removals;
        while (!queue_.empty() && puts.size() < max_batch) {
            auto& [session, rec] = queue_.front();
            puts.push_back({"egress", egress_log_record_id(session, rec.seq), session, egress::to_json(rec)});
            if (rec.seq > keep_) removals.emplace_back("egress", egress_log_record_id(session, rec.seq - keep_));
            queue_.pop_front();
        }
        busy_ = true;
        lock.unlock();
        try {
            store_.write_records(puts, removals);
            written_ += puts.size();
            ++batches_;
        } catch (const std::exception& e) {
            dropped_ += puts.size();
            spdlog::warn("egress log: {} record(s) not saved: {}", puts.size(), e.what());
        }
        lock.lock();
        busy_ = false;
        if (queue_.empty()) drained_.notify_all();
    }
    busy_ = false;
    drained_.notify_all();
}

void egress_log_writer::render_metrics(std::string& out) const {
    out += "# HELP cellgate_egress_log_records_total Egress audit records by what became of them.\n"
           "# TYPE cellgate_egress_log_records_total counter\n";
    out += "cellgate_egress_log_records_total{outcome=\"written\"} " + std::to_string(written_.load()) + "\n";
    out += "cellgate_egress_log_records_total{outcome=\"dropped\"} " + std::to_string(dropped_.load()) + "\n";
    out += "# HELP cellgate_egress_log_batches_total Transactions that wrote egress audit records.\n"
           "# TYPE cellgate_egress_log_batches_total counter\n";
    out += "cellgate_egress_log_batches_total " + std::to_string(batches_.load()) + "\n";
    std::size_t queued = 0;
    {
        std::lock_guard lock(mutex_);
        queued = queue_.size();
    }
    out += "# HELP cellgate_egress_log_queue Egress audit records waiting for the writer, and the most that may.\n"
           "# TYPE cellgate_egress_log_queue gauge\n";
    out += "cellgate_egress_log_queue{state=\"queued\"} " + std::to_string(queued) + "\n";
    out += "cellgate_egress_log_queue{state=\"limit\"} " + std::to_string(max_queued_) + "\n";
}

}  // namespace cellgate::core
