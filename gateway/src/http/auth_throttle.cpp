#include "http/auth_throttle.hpp"

#include <algorithm>
#include <cmath>

namespace cellgate::http {

double auth_throttle::refill_locked(bucket& b, clock::time_point now) const {
    const auto elapsed = std::chrono::duration<double>(now - b.at).count();
    if (elapsed > 0) {
        b.credits = std::min(options_.burst, b.credits + elapsed * options_.per_second);
        b.at = now;
    }
    return b.credits;
}

unsigned auth_throttle::refused_for(const std::string& address, clock::time_point now) {
    std::lock_guard lock(mutex_);
    const auto it = buckets_.find(address);
    if (it == buckets_.end()) return 0;
    const auto credits = refill_locked(it->second, now);
    if (credits >= 1) return 0;
    ++refusals_;
    return static_cast<unsigned>(std::ceil((1 - credits) / options_.per_second));
}

void auth_throttle::failed(const std::string& address, clock::time_point now) {
    std::lock_guard lock(mutex_);
    auto it = buckets_.find(address);
    if (it == buckets_.end()) {
        if (buckets_.size() >= options_.max_addresses) {
            // Forget those whose credits are whole again; if none is, the one
            // with the most left (the least suspect), never one at none.
            for (auto b = buckets_.begin(); b != buckets_.end();)
                b = refill_locked(b->second, now) >= options_.burst ? buckets_.erase(b) : std::next(b);
            if (buckets_.size() >= options_.max_addresses)
                buckets_.erase(std::max_element(buckets_.begin(), buckets_.end(), [](const auto& a, const auto& b) {
                    return a.second.credits < b.second.credits;
                }));
        }
        it = buckets_.emplace(address, bucket{options_.burst, now}).first;
    }
    refill_locked(it->second, now);
    it->second.credits = std::max(0.0, it->second.credits - 1);
}

std::uint64_t auth_throttle::refusals() const {
    std::lock_guard lock(mutex_);
    return refusals_;
}

std::size_t auth_throttle::tracked() const {
    std::lock_guard lock(mutex_);
    return buckets_.size();
}

}  // namespace cellgate::http
