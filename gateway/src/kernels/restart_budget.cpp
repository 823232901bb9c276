#include "kernels/restart_budget.hpp"

#include <algorithm>

namespace cellgate::kernels {

bool restart_budget::take(clock::time_point now) {
    std::erase_if(taken_, [&](auto t) { return now - t > window_; });
    if (static_cast<int>(taken_.size()) >= limit_) return false;
    taken_.push_back(now);
    return true;
}

std::chrono::seconds restart_budget::failed(clock::time_point now) {
    ++failures_;
    const auto pause = std::chrono::seconds(std::min(30, 1 << std::min(failures_ - 1, 5)));
    retry_at_ = now + pause;
    return pause;
}

}  // namespace cellgate::kernels
