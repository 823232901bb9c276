#include "metrics/metrics.hpp"

#include <cstdio>
#include <tuple>

namespace cellgate::metrics {

namespace {

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

void counter(std::string& out, const char* name, const char* help, std::uint64_t value) {
    out += "# HELP ";
    out += name;
    out += " ";
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += " counter\n";
    out += name;
    out += " " + std::to_string(value) + "\n";
}

const std::vector<double> latency_bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,  0.5,    1,     2.5,  5,     10,   30};

}  // namespace

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<std::uint64_t>[bounds_.size() + 1]) {
    for (std::size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void histogram::observe(double value) {
    std::size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    ++buckets_[i];
    ++count_;
    sum_micros_ += static_cast<std::uint64_t>(value * 1e6);
}

void histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    std::uint64_t cumulative = 0;
    const std::string sep = labels.empty() ? "" : labels + ",";
    for (std::size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += buckets_[i].load();
        out += name + "_bucket{" + sep + "le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
    }
    cumulative += buckets_[bounds_.size()].load();
    out += name + "_bucket{" + sep + "le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
    const std::string braces = labels.empty() ? "" : "{" + labels + "}";
    out += name + "_sum" + braces + " " + number(static_cast<double>(sum_micros_.load()) / 1e6) + "\n";
    out += name + "_count" + braces + " " + std::to_string(count_.load()) + "\n";
}

registry::registry() : sandbox_start_seconds({0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30}) {}

void registry::observe_request(const std::string& method, const std::string& route, unsigned status,
                               double seconds) {
    std::lock_guard lock(mutex_);
    auto& h = requests_[{method, route, status / 100}];
    if (!h) h = std::make_unique<histogram>(latency_bounds);
    h->observe(seconds);
}

void registry::count_kernel_drop(const std::string& kernel_id) {
    std::lock_guard lock(mutex_);
    ++drops_by_kernel_[kernel_id];
}

void registry::forget_kernel(const std::string& kernel_id) {
    std::lock_guard lock(mutex_);
    drops_by_kernel_.erase(kernel_id);
}

void registry::add_gauge_source(std::function<void(std::string&)> source) {
    std::lock_guard lock(mutex_);
    gauge_sources_.push_back(std::move(source));
}

std::string registry::render() const {
    std::string out;
    out.reserve(8192);
    counter(out, "cellgate_executions_total", "execute_request messages forwarded to kernels", executions);
    counter(out, "cellgate_sandbox_starts_total", "sandboxes started", sandbox_starts);
    counter(out, "cellgate_sandbox_start_failures_total", "sandbox starts that failed", sandbox_start_failures);
    counter(out, "cellgate_kernel_restarts_total", "kernel restarts (requested or automatic)", kernel_restarts);
    counter(out, "cellgate_kernel_pauses_total", "kernels paused (requested or when idle)", kernel_pauses);
    counter(out, "cellgate_kernel_resumes_total", "paused kernels resumed", kernel_resumes);
    counter(out, "cellgate_kernel_deaths_total", "kernels that died unexpectedly", kernel_deaths);
    counter(out, "cellgate_kernel_messages_dropped_total",
            "kernel messages dropped as malformed, unsigned or oversized", kernel_messages_dropped);
    counter(out, "cellgate_iopub_rate_limited_total", "iopub messages withheld by the rate limit",
            iopub_rate_limited);
    counter(out, "cellgate_cell_output_withheld_total",
            "iopub messages of WebSocket cells withheld past the session's output_limit or result_limit",
            cell_output_withheld);
    counter(out, "cellgate_cell_time_limits_total", "WebSocket cells interrupted at the session's exec_timeout",
            cell_time_limits);
    counter(out, "cellgate_ws_tenant_refusals_total",
            "WebSocket upgrades refused because the tenant had --max-websockets-per-tenant open", ws_tenant_refusals);
    counter(out, "cellgate_ws_slow_client_closes_total",
            "WebSocket connections closed because the client fell behind", ws_slow_client_closes);
    counter(out, "cellgate_connections_refused_total",
            "client connections refused at the connection caps (total or per address)", connections_refused);
    counter(out, "cellgate_sse_slow_client_closes_total",
            "event streams ended because the client fell behind", sse_slow_client_closes);
    counter(out, "cellgate_cluster_hops_total",
            "requests relayed to the cluster node that made the id they name", cluster_hops);
    if (open_connections)
        out += "# HELP cellgate_connections open client connections (HTTP and WebSocket)\n"
               "# TYPE cellgate_connections gauge\n"
               "cellgate_connections " + std::to_string(open_connections()) + "\n";
    out += "# HELP cellgate_ws_connections open kernel WebSocket connections\n"
           "# TYPE cellgate_ws_connections gauge\n"
           "cellgate_ws_connections " + std::to_string(ws_connections.load()) + "\n";
    out += "# HELP cellgate_sandbox_start_seconds time from request to first kernel_info_reply\n"
           "# TYPE cellgate_sandbox_start_seconds histogram\n";
    sandbox_start_seconds.render(out, "cellgate_sandbox_start_seconds", "");
    std::lock_guard lock(mutex_);
    out += "# HELP cellgate_http_request_duration_seconds HTTP request latency\n"
           "# TYPE cellgate_http_request_duration_seconds histogram\n";
    for (const auto& [key, h] : requests_)
        h->render(out, "cellgate_http_request_duration_seconds",
                  "method=\"" + key.method + "\",route=\"" + key.route + "\",status=\"" +
                      std::to_string(key.status_class) + "xx\"");
    out += "# HELP cellgate_kernel_messages_dropped_by_kernel messages dropped, per live kernel that dropped any\n"
           "# TYPE cellgate_kernel_messages_dropped_by_kernel counter\n";
    for (const auto& [id, n] : drops_by_kernel_)
        out += "cellgate_kernel_messages_dropped_by_kernel{kernel=\"" + id + "\"} " + std::to_string(n) + "\n";
    for (const auto& source : gauge_sources_) source(out);
    return out;
}

}  // namespace cellgate::metrics
