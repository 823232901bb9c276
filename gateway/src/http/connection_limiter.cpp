#include "http/connection_limiter.hpp"

namespace cellgate::http {

connection_limiter::connection_limiter(std::size_t max_total, std::size_t max_per_address)
    : counters_(std::make_shared<counters>()) {
    counters_->max_total = max_total;
    counters_->max_per_address = max_per_address;
}

connection_limiter::slot connection_limiter::acquire(const std::string& address, bool per_address) {
    {
        std::lock_guard lock(counters_->mutex);
        auto& mine = counters_->per_address[address];
        if (counters_->total >= counters_->max_total || (per_address && mine >= counters_->max_per_address)) {
            if (mine == 0) counters_->per_address.erase(address);
            return nullptr;
        }
        ++mine;
        ++counters_->total;
    }
    // The deleter owns the counters and the address; the pointer itself is a
    // tag nobody reads.
    return slot(static_cast<const void*>(counters_.get()),
                [c = counters_, address](const void*) { c->release(address); });
}

connection_limiter::slot connection_limiter::both(slot a, slot b) {
    auto pair = std::make_shared<std::pair<slot, slot>>(std::move(a), std::move(b));
    return slot(pair, pair.get());
}

void connection_limiter::counters::release(const std::string& address) {
    std::lock_guard lock(mutex);
    --total;
    const auto it = per_address.find(address);
    if (it != per_address.end() && --it->second == 0) per_address.erase(it);
}

std::size_t connection_limiter::open() const {
    std::lock_guard lock(counters_->mutex);
    return counters_->total;
}

std::size_t connection_limiter::open_from(const std::string& address) const {
    std::lock_guard lock(counters_->mutex);
    const auto it = counters_->per_address.find(address);
    return it == counters_->per_address.end() ? 0 : it->second;
}

}  // namespace cellgate::http
