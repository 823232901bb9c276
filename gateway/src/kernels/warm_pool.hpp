#pragma once

#include "kernels/kernel.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::kernels {

// The warm pool's books: per kernelspec, the kernels started ahead of demand
// that are ready to be claimed, the starts under way, and the claims waiting
// for one; which starts to make next; a pause after a failed start. The
// manager does the starting (launch threads, readiness) and calls this under
// its own lock: not thread-safe. A claimed kernel leaves the pool for good.
//
// Bursts (issue 16). A claim that finds the pool empty waits here for the
// next kernel that becomes ready, from whichever start: a start made for it,
// or a refill already under way. Claims are served before the pool is
// refilled, and a burst's own starts run at most `concurrency` at once, so
// the first waiters get the first kernels instead of every start sharing the
// CPU and all of them finishing late. Which waiter gets a kernel: the oldest
// of the tenant with the fewest waiting, so one tenant's burst does not queue
// another's single create behind all of it. Misses also raise the pool's
// target for `growth_window` (at most to the spec's `max`), so the next burst
// finds more ready; past the window, kernels above the target are trimmed.
class warm_pool {
public:
    using clock = std::chrono::steady_clock;

    struct target {
        std::size_t base = 0;  // ready kernels wanted when nothing happens
        std::size_t max = 0;   // how far recent misses may raise it (>= base)
        // Unused this long (no claim), the pool drops to nothing until the
        // next claim (a template's); zero: never.
        std::chrono::seconds idle_drop{0};
        clock::time_point used{};  // its last claim (or when it was set)
    };
    // A claim waiting for a kernel: `give` hands it one; `refuse` says the
    // start made for it failed. Both are called by the manager, outside its lock.
    struct waiter {
        std::string tenant;
        std::function<void(kernel_ptr)> give;
        std::function<void(const std::string& why)> refuse;
    };
    // A start to make: for the pool, or for waiting claims (`demand`: no
    // preload, the normal CPU weight).
    struct start {
        std::string spec;
        bool demand = false;
    };

    // `targets`: ready kernels wanted per kernelspec; at most `concurrency`
    // pool starts, and as many starts for waiting claims, at once.
    warm_pool(std::map<std::string, target> targets, std::size_t concurrency,
              std::chrono::seconds growth_window = std::chrono::seconds(300));
    // A fixed target per spec (no growth).
    warm_pool(const std::map<std::string, std::size_t>& targets, std::size_t concurrency);

    // The starts to make now (each counted as starting), when `room` more
    // kernels fit under the total limit. Waiting claims hold admission slots
    // already: their starts do not need room.
    std::vector<start> plan(clock::time_point now, std::size_t room);
    // A start ended. Its kernel, when ready, goes to a waiting claim (returned:
    // the caller gives it) or joins the pool (nothing returned). A failed start
    // made for claims returns the waiter it was for, to refuse.
    std::optional<waiter> start_ended(const std::string& spec, bool demand, kernel_ptr ready);
    // A start failed: counted, and no pool start is planned for a few seconds.
    void start_failed(const std::string& spec, clock::time_point now);

    // A ready kernel of `spec` (counted as a claim), or null (a miss when the
    // spec has a pool). `usable` drops ones that died meanwhile.
    kernel_ptr take(const std::string& spec, const std::function<bool(const kernel&)>& usable,
                    clock::time_point now = clock::now());
    bool has_pool(const std::string& spec) const;
    // After a miss: the claim waits for the next ready kernel of `spec`.
    void wait(const std::string& spec, waiter w);
    std::size_t waiting() const;
    std::size_t ready() const;  // of every spec
    // Every waiting claim, leaving none (shutdown).
    std::vector<waiter> drain_waiters();
    // The ready kernels above the current target, once misses have stopped
    // raising it; they leave the pool (the caller stops them).
    std::vector<kernel_ptr> trim(clock::time_point now);
    // The target now: the base, raised by the misses of the growth window.
    std::size_t target_of(const std::string& spec, clock::time_point now);

    bool holds(const kernel_ptr& k) const;
    bool remove(const kernel_ptr& k);
    // Every ready kernel, leaving the pool empty (shutdown).
    std::vector<kernel_ptr> drain();
    // A kernelspec's pool from now on (a template's: `size` ready, raised by
    // misses up to twice that, dropped after `idle_drop` without a claim and
    // back at the next; 0 ends it); returns its ready kernels, which leave
    // (the caller stops them: they may run what the spec ran before).
    std::vector<kernel_ptr> reset(const std::string& spec, std::size_t size, clock::time_point now,
                                  std::chrono::seconds idle_drop = std::chrono::seconds(0));
    void for_each(const std::function<void(const kernel_ptr&)>& fn) const;

    // Prometheus gauges and counters: cellgate_pool_*.
    void render(std::string& out) const;

    static constexpr std::chrono::seconds failure_pause{5};

private:
    std::size_t starting_total() const;
    std::size_t demand_total() const;
    void forget_old_misses(const std::string& spec, clock::time_point now);

    std::map<std::string, target> targets_;
    std::size_t concurrency_;
    std::chrono::seconds growth_window_;
    std::map<std::string, std::deque<kernel_ptr>> ready_;
    std::map<std::string, std::size_t> starting_;  // pool starts
    std::map<std::string, std::size_t> demand_;    // starts for waiting claims
    std::map<std::string, std::deque<waiter>> waiting_;
    std::map<std::string, std::deque<clock::time_point>> misses_at_;  // within the growth window
    std::uint64_t claims_ = 0, misses_ = 0, failures_ = 0, waited_ = 0;
    clock::time_point paused_until_{};
};

}  // namespace cellgate::kernels
