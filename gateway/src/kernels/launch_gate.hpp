#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace cellgate::kernels {

// Per-tenant fairness for the launch pool (review M1c). A sandbox start can
// take its whole start timeout (tenant code runs before the kernel answers),
// and each one holds a pool thread; without a cap, a few sessions whose starts
// hang would keep every thread busy and every other tenant's starts, restarts
// and shutdowns would wait behind them. Each tenant may have at most
// `per_tenant` launches on the pool; the rest wait in that tenant's own queue,
// in order, and go to the pool as its earlier ones finish.
//
// The queues are bounded by what feeds them: starts by admission (a tenant's
// kernel quota), restarts by one per kernel at a time.
class launch_gate {
public:
    using job = std::function<void()>;
    using poster = std::function<void(job)>;  // hands a job to the pool

    launch_gate(std::size_t per_tenant, poster post);

    // Runs `work` on the pool now, or after the tenant's earlier launches.
    void submit(const std::string& tenant, job work);

    std::size_t in_flight(const std::string& tenant) const;
    std::size_t waiting(const std::string& tenant) const;
    std::size_t waiting_total() const;

private:
    struct lane {
        std::size_t running = 0;
        std::deque<job> queue;
    };
    void run(const std::string& tenant, job work);
    void finished(const std::string& tenant);

    const std::size_t per_tenant_;
    poster post_;
    mutable std::mutex mutex_;
    std::map<std::string, lane> lanes_;
};

}  // namespace cellgate::kernels
