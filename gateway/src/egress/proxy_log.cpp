// The audit log: each session's records of finished connections (bounded,
// numbered, carried over from an earlier gateway by restore_log), the
// callback told of each, and the counters behind the metrics. It owns the
// sessions' logs and sequence numbers, proxy::impl::on_record and the stats.

#include "egress/proxy_internal.hpp"

#include <algorithm>

namespace cellgate::egress {

nlohmann::json to_json(const connection_record& r) {
    return {{"seq", r.seq},
            {"time_ms", r.time_ms},
            {"duration_ms", r.duration_ms},
            {"method", r.method},
            {"host", r.host},
            {"port", r.port},
            {"address", r.address},
            {"bytes_up", r.bytes_up},
            {"bytes_down", r.bytes_down},
            {"verdict", r.allowed ? "allowed" : "refused"},
            {"rule", r.rule},
            {"reason", r.reason},
            {"credential_injected", r.injected},
            {"tls_terminated", r.tls_terminated}};
}

void proxy::impl::finish(const std::shared_ptr<session_state>& s, connection_record rec,
                         const std::shared_ptr<connection>& c) {
    std::function<void(const std::string&, const connection_record&)> cb;
    {
        std::lock_guard lock(mutex);
        if (c) {
            s->connections.erase(c);
            --s->open;
            --open_total;
        }
        rec.seq = s->next_seq++;
        s->log.push_back(rec);
        while (s->log.size() > opt.max_log_per_session) s->log.pop_front();
        cb = on_record;
    }
    if (c) --stats.open;
    (rec.allowed ? stats.allowed : stats.refused) += 1;
    stats.bytes_up += rec.bytes_up;
    stats.bytes_down += rec.bytes_down;
    if (cb) cb(s->id, rec);
}

void proxy::restore_log(const std::string& session, std::vector<connection_record> earlier) {
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->sessions.find(session);
    if (it == impl_->sessions.end()) return;
    auto& s = *it->second;
    std::sort(earlier.begin(), earlier.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
    std::deque<connection_record> merged(earlier.begin(), earlier.end());
    for (auto& r : s.log) merged.push_back(std::move(r));
    while (merged.size() > impl_->opt.max_log_per_session) merged.pop_front();
    s.log = std::move(merged);
    if (!earlier.empty()) s.next_seq = std::max(s.next_seq, earlier.back().seq + 1);
}

std::vector<connection_record> proxy::log(const std::string& session, std::uint64_t after, std::size_t limit) const {
    std::vector<connection_record> out;
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->sessions.find(session);
    if (it == impl_->sessions.end()) return out;
    for (const auto& r : it->second->log) {
        if (r.seq <= after) continue;
        if (out.size() >= limit) break;
        out.push_back(r);
    }
    return out;
}

void proxy::on_record(std::function<void(const std::string&, const connection_record&)> f) {
    std::lock_guard lock(impl_->mutex);
    impl_->on_record = std::move(f);
}

const proxy::counters& proxy::stats() const noexcept { return impl_->stats; }

void proxy::render_metrics(std::string& out) const {
    const auto& s = impl_->stats;
    out += "# HELP cellgate_egress_connections_total Egress proxy connections by verdict.\n"
           "# TYPE cellgate_egress_connections_total counter\n";
    out += "cellgate_egress_connections_total{verdict=\"allowed\"} " + std::to_string(s.allowed.load()) + "\n";
    out += "cellgate_egress_connections_total{verdict=\"refused\"} " + std::to_string(s.refused.load()) + "\n";
    out += "# HELP cellgate_egress_bytes_total Bytes through the egress proxy.\n"
           "# TYPE cellgate_egress_bytes_total counter\n";
    out += "cellgate_egress_bytes_total{direction=\"up\"} " + std::to_string(s.bytes_up.load()) + "\n";
    out += "cellgate_egress_bytes_total{direction=\"down\"} " + std::to_string(s.bytes_down.load()) + "\n";
    out += "# HELP cellgate_egress_open_connections Egress proxy connections open now.\n"
           "# TYPE cellgate_egress_open_connections gauge\n";
    out += "cellgate_egress_open_connections " + std::to_string(s.open.load()) + "\n";
    out += "# HELP cellgate_egress_rate_limited_total Egress connections refused past the per-session accept rate.\n"
           "# TYPE cellgate_egress_rate_limited_total counter\n";
    out += "cellgate_egress_rate_limited_total " + std::to_string(s.rate_limited.load()) + "\n";
    out += "# HELP cellgate_egress_accept_rate Egress connections a session may open per second.\n"
           "# TYPE cellgate_egress_accept_rate gauge\n";
    out += "cellgate_egress_accept_rate " + std::to_string(impl_->opt.accept_rate) + "\n";
    out += "# HELP cellgate_egress_host_addresses The host's own addresses the proxy treats as internal.\n"
           "# TYPE cellgate_egress_host_addresses gauge\n";
    out += "cellgate_egress_host_addresses " + std::to_string(impl_->own->list().size()) + "\n";
    impl_->resolver->render_metrics(out);
}

}  // namespace cellgate::egress
