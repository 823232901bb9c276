#pragma once

// The egress audit log's way into the state store, off the io threads: the
// proxy's callback only queues a record (at most `max_queued`; past that it
// is dropped and counted), and one thread of its own writes what is queued
// in one transaction at a time (each record, and the removal of the one
// `keep` records before it). stop() writes what is left and joins.

#include "egress/proxy.hpp"
#include "kernels/state_store.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace cellgate::core {

// The key of a connection record in the state store: the kernel's id and the
// record's number, padded so that keys sort in order.
std::string egress_log_record_id(const std::string& kernel_id, std::uint64_t seq);

class egress_log_writer {
public:
    egress_log_writer(kernels::state_store& store, std::size_t keep, std::size_t max_queued = 10000);
    ~egress_log_writer();  // stop()
    egress_log_writer(const egress_log_writer&) = delete;
    egress_log_writer& operator=(const egress_log_writer&) = delete;

    // From any thread; never blocks on the store. False: dropped.
    bool add(const std::string& session, const egress::connection_record& rec);
    void stop();
    // Waits until everything queued before it is written (tests).
    void flush();

    std::uint64_t written() const noexcept { return written_.load(); }
    std::uint64_t dropped() const noexcept { return dropped_.load(); }
    std::uint64_t batches() const noexcept { return batches_.load(); }
    void render_metrics(std::string& out) const;

private:
    void run();
    kernels::state_store& store_;
    const std::size_t keep_, max_queued_;
    mutable std::mutex mutex_;
    std::condition_variable wake_, drained_;
    std::deque<std::pair<std::string, egress::connection_record>> queue_;
    bool stopping_ = false, busy_ = false;
    std::atomic<std::uint64_t> written_{0}, dropped_{0}, batches_{0};
    std::thread thread_;
};

}  // namespace cellgate::core
