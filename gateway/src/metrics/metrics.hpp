#pragma once

// Prometheus text exposition of the gateway's counters, gauges and latency
// histograms. Thread-safe; hot paths touch only atomics.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <mutex>
#include <string>
#include <vector>

namespace cellgate::metrics {

class histogram {
public:
    explicit histogram(std::vector<double> bounds);
    void observe(double value);
    void render(std::string& out, const std::string& name, const std::string& labels) const;

private:
    std::vector<double> bounds_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // one per bound + +Inf
    std::atomic<std::uint64_t> count_{0};
    std::atomic<std::uint64_t> sum_micros_{0};
};

class registry {
public:
    registry();

    std::atomic<std::uint64_t> executions{0};
    std::atomic<std::uint64_t> sandbox_starts{0};
    std::atomic<std::uint64_t> sandbox_start_failures{0};
    std::atomic<std::uint64_t> kernel_restarts{0};
    std::atomic<std::uint64_t> kernel_pauses{0};
    std::atomic<std::uint64_t> kernel_resumes{0};
    std::atomic<std::uint64_t> kernel_deaths{0};
    std::atomic<std::uint64_t> kernel_messages_dropped{0};
    std::atomic<std::uint64_t> iopub_rate_limited{0};
    std::atomic<std::uint64_t> cell_output_withheld{0};  // past a cell's output_limit or result_limit (Jupyter surface)
    std::atomic<std::uint64_t> cell_time_limits{0};      // cells interrupted for their exec_timeout (Jupyter surface)
    std::atomic<std::uint64_t> ws_slow_client_closes{0};
    std::atomic<std::uint64_t> ws_tenant_refusals{0};  // a tenant at --max-websockets-per-tenant
    std::atomic<std::int64_t> ws_connections{0};
    std::atomic<std::uint64_t> connections_refused{0};   // over the connection caps
    std::atomic<std::uint64_t> sse_slow_client_closes{0};
    std::atomic<std::uint64_t> cluster_hops{0};  // requests relayed to the node that owns their id
    std::function<std::size_t()> open_connections;       // set by the HTTP surface
    histogram sandbox_start_seconds;

    // A request took `seconds`; `route` is the route pattern, not the raw path.
    void observe_request(const std::string& method, const std::string& route, unsigned status,
                         double seconds);

    // Messages dropped per kernel (M6): which kernel floods, not just that one
    // does. Bounded by the live kernels: forget_kernel on removal.
    void count_kernel_drop(const std::string& kernel_id);
    void forget_kernel(const std::string& kernel_id);

    // Sources of gauges computed on scrape (kernels by state, pool sizes, …).
    void add_gauge_source(std::function<void(std::string& out)> source);

    std::string render() const;

private:
    struct request_key {
        std::string method, route;
        unsigned status_class;
        bool operator<(const request_key& o) const {
            return std::tie(method, route, status_class) < std::tie(o.method, o.route, o.status_class);
        }
    };
    mutable std::mutex mutex_;
    std::map<request_key, std::unique_ptr<histogram>> requests_;
    std::vector<std::function<void(std::string&)>> gauge_sources_;
    std::map<std::string, std::uint64_t> drops_by_kernel_;
};

}  // namespace cellgate::metrics
