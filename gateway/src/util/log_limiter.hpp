#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace cellgate::util {

// Rate limit for a log line that untrusted input can trigger at will (review
// M6: a kernel sending tiny unsigned messages made one warn line each, a
// million a second, on the reactor thread). Per window of `interval`, the
// first `burst` events are logged one by one; the rest are only counted, and
// the first event after the window tells how many were left out, so the log
// keeps at most burst + 1 lines per window per source. Time is passed in, so
// tests need no clock.
class log_limiter {
public:
    using clock = std::chrono::steady_clock;

    struct decision {
        bool log = false;              // write this event's own line
        std::uint64_t suppressed = 0;  // first write "N more in the last <interval>" (when > 0)
    };

    log_limiter(std::size_t burst, clock::duration interval) : burst_(burst), interval_(interval) {}

    decision note(clock::time_point now) {
        std::lock_guard lock(mutex_);
        decision d;
        ++total_;
        if (!started_ || now - window_start_ >= interval_) {
            d.suppressed = suppressed_;
            suppressed_ = 0;
            logged_ = 0;
            window_start_ = now;
            started_ = true;
        }
        if (logged_ < burst_) {
            ++logged_;
            d.log = true;
        } else {
            ++suppressed_;
        }
        return d;
    }

    std::uint64_t total() const {
        std::lock_guard lock(mutex_);
        return total_;
    }
    clock::duration interval() const noexcept { return interval_; }

private:
    const std::size_t burst_;
    const clock::duration interval_;
    mutable std::mutex mutex_;
    bool started_ = false;
    clock::time_point window_start_{};
    std::size_t logged_ = 0;
    std::uint64_t suppressed_ = 0;
    std::uint64_t total_ = 0;
};

}  // namespace cellgate::util
