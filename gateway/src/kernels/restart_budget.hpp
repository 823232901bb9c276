#pragma once

#include <chrono>
#include <vector>

namespace cellgate::kernels {

// How often one kernel may be restarted without a client asking: at most
// `limit` restarts in any sliding `window` (restarts after a death and
// revives on a client's call draw on the same budget), and after a restart
// that failed, a pause before the next try that doubles each time in a row,
// 1, 2, 4 … 30 s. So a sandbox that cannot start is retried a few times and
// then left dead, never a loop on the launch threads. Times come in as
// arguments (tests pass their own). Not thread-safe: the manager holds it
// under its lock, one per kernel.
class restart_budget {
public:
    using clock = std::chrono::steady_clock;

    restart_budget(int limit, std::chrono::seconds window) noexcept : limit_(limit), window_(window) {}

    // Takes one restart at `now` if the window has room for it.
    bool take(clock::time_point now);
    // A revive must wait until the pause after the last failure has passed.
    bool paused(clock::time_point now) const noexcept { return now < retry_at_; }
    // A restart failed at `now`: the pause before the next try.
    std::chrono::seconds failed(clock::time_point now);
    void succeeded() noexcept { failures_ = 0; }

    int failures() const noexcept { return failures_; }  // in a row

private:
    int limit_;
    std::chrono::seconds window_;
    std::vector<clock::time_point> taken_;
    int failures_ = 0;
    clock::time_point retry_at_{};
};

}  // namespace cellgate::kernels
