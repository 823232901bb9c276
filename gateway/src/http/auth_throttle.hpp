#pragma once

// Failed authentication, throttled per client address (security review L6):
// each failure (a wrong or missing token, a guard's 401 or 403) takes one
// of an address's `burst` credits, which come back at `per_second`; an
// address with none left is answered 429 with Retry-After before any token
// is looked at. Bounded: at most `max_addresses` are tracked (those whose
// credits are whole again are forgotten first, then those with the most). A trusted proxy's requests
// are charged to the client its X-Forwarded-For names last.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace cellgate::http {

class auth_throttle {
public:
    using clock = std::chrono::steady_clock;
    struct options {
        double burst = 20;          // failures in a row before the refusals start
        double per_second = 1;      // failures forgiven per second after that
        std::size_t max_addresses = 16384;
    };

    explicit auth_throttle(options o) : options_(o) {}

    // Seconds to wait when `address` is refused now; 0 when it may try.
    unsigned refused_for(const std::string& address, clock::time_point now = clock::now());
    void failed(const std::string& address, clock::time_point now = clock::now());

    std::uint64_t refusals() const;
    std::size_t tracked() const;

private:
    struct bucket {
        double credits = 0;
        clock::time_point at;
    };
    double refill_locked(bucket& b, clock::time_point now) const;

    const options options_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, bucket> buckets_;
    std::uint64_t refusals_ = 0;
};

}  // namespace cellgate::http
