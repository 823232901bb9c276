#pragma once

#include "kernels/kernel.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cellgate::kernels {

// The warm pool's books: per kernelspec, the kernels started ahead of demand
// that are ready to be claimed, and the starts under way; which starts to
// make next; a pause after a failed start. The manager does the starting
// (launch threads, readiness) and calls this under its own lock: not
// thread-safe. A claimed kernel leaves the pool for good.
class warm_pool {
public:
    using clock = std::chrono::steady_clock;

    // `targets`: ready kernels wanted per kernelspec; at most `concurrency`
    // starts at once.
    warm_pool(std::map<std::string, std::size_t> targets, std::size_t concurrency)
        : targets_(std::move(targets)), concurrency_(concurrency) {}

    // The kernelspecs to start one more of now (each counted as starting),
    // when `room` more kernels fit under the total limit.
    std::vector<std::string> plan(clock::time_point now, std::size_t room);
    // A start ended: with the kernel ready (it joins the pool), or not (null).
    void start_ended(const std::string& spec, kernel_ptr ready);
    // A start failed: counted, and no start is planned for a few seconds.
    void start_failed(const std::string& spec, clock::time_point now);

    // A ready kernel of `spec` (counted as a claim), or null (a miss when the
    // spec has a pool). `usable` drops ones that died meanwhile.
    kernel_ptr take(const std::string& spec, const std::function<bool(const kernel&)>& usable);
    bool holds(const kernel_ptr& k) const;
    bool remove(const kernel_ptr& k);
    // Every ready kernel, leaving the pool empty (shutdown).
    std::vector<kernel_ptr> drain();
    void for_each(const std::function<void(const kernel_ptr&)>& fn) const;

    // Prometheus gauges and counters: cellgate_pool_*.
    void render(std::string& out) const;

    static constexpr std::chrono::seconds failure_pause{5};

private:
    std::size_t starting_total() const;

    std::map<std::string, std::size_t> targets_;
    std::size_t concurrency_;
    std::map<std::string, std::deque<kernel_ptr>> ready_;
    std::map<std::string, std::size_t> starting_;
    std::uint64_t claims_ = 0, misses_ = 0, failures_ = 0;
    clock::time_point paused_until_{};
};

}  // namespace cellgate::kernels
