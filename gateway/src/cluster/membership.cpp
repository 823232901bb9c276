#include "cluster/membership.hpp"

#include "cellgate/protocol/message.hpp"

#include <spdlog/spdlog.h>

namespace cellgate::cluster {

membership::membership(options opts, std::function<nlohmann::json()> figures)
    : opts_(std::move(opts)), figures_(std::move(figures)), etcd_(opts_.etcd), started_(protocol::now_iso8601()) {
    if (opts_.ttl < std::chrono::seconds(2)) opts_.ttl = std::chrono::seconds(2);
}

membership::~membership() { stop(); }

void membership::start() {
    thread_ = std::thread([this] { run(); });
}

void membership::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::string membership::record() const {
    nlohmann::json r = {{"tag", opts_.tag}, {"address", opts_.address}, {"ttl", opts_.ttl.count()},
                        {"started", started_}, {"updated", protocol::now_iso8601()}};
    if (figures_) r.update(figures_());
    return r.dump();
}

bool membership::refresh() {
    try {
        if (lease_ != 0 && etcd_.keepalive(lease_) <= 0) {
            spdlog::warn("cluster: the lease of node {} had expired; joining again", opts_.tag);
            lease_ = 0;
        }
        bool joined = false;
        if (lease_ == 0) {
            lease_ = etcd_.grant(opts_.ttl);
            joined = true;
            // Kept without a lease: once this node is gone, the router can
            // still tell its ids (410, gone) from ids no node ever made (404).
            etcd_.put(opts_.prefix + "tags/" + opts_.tag, nlohmann::json{{"tag", opts_.tag}, {"address", opts_.address}}.dump());
        }
        etcd_.put(node_key(), record(), lease_);
        std::lock_guard lock(mutex_);
        if (joined) {
            ++joins_;
            spdlog::info("cluster: node {} registered at {} (lease {:x}, TTL {} s)", opts_.tag, opts_.address,
                         lease_, opts_.ttl.count());
        } else if (!last_error_.empty()) {
            spdlog::info("cluster: etcd answers again; node {} keeps its lease", opts_.tag);
        }
        last_ok_ = clock::now();
        last_error_.clear();
        return true;
    } catch (const std::exception& e) {
        std::lock_guard lock(mutex_);
        if (last_error_.empty()) spdlog::warn("cluster: node {}: {}", opts_.tag, e.what());
        last_error_ = e.what();
        ++failures_;
        return false;
    }
}

void membership::run() {
    const auto interval = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(500), opts_.ttl / 3);
    for (;;) {
        const bool ok = refresh();
        std::unique_lock lock(mutex_);
        // After a failure, try again sooner (but not in a tight loop).
        if (wake_.wait_for(lock, ok ? interval : interval / 2, [this] { return stopping_; })) break;
    }
    if (lease_ != 0) {
        try {
            etcd_.revoke(lease_);  // the record goes now, not a TTL later
            spdlog::info("cluster: node {} left (lease revoked)", opts_.tag);
        } catch (const std::exception& e) {
            spdlog::warn("cluster: node {} could not revoke its lease: {}", opts_.tag, e.what());
        }
    }
}

std::optional<std::string> membership::refusal() const {
    std::lock_guard lock(mutex_);
    if (!last_ok_)
        return "This node has not joined its cluster yet: etcd has not answered" +
               (last_error_.empty() ? std::string() : " (" + last_error_ + ")") +
               "; it admits no new session until it does";
    const auto age = clock::now() - *last_ok_;
    if (age >= opts_.ttl * 2 / 3)
        return "This node has lost etcd (no answer for " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(age).count()) +
               " s): it admits no new session until etcd answers again; open sessions keep working";
    return std::nullopt;
}

void membership::render(std::string& out) const {
    const bool admitting = !refusal();
    std::lock_guard lock(mutex_);
    const auto age = last_ok_ ? std::chrono::duration<double>(clock::now() - *last_ok_).count() : -1.0;
    out += "# HELP cellgate_cluster_admitting 1 while this node's lease is fresh and it admits new sessions\n"
           "# TYPE cellgate_cluster_admitting gauge\ncellgate_cluster_admitting{tag=\"" +
           opts_.tag + "\"} " + (admitting ? "1" : "0") + "\n";
    out += "# TYPE cellgate_cluster_etcd_ok_age_seconds gauge\ncellgate_cluster_etcd_ok_age_seconds " +
           std::to_string(age) + "\n";
    out += "# TYPE cellgate_cluster_joins_total counter\ncellgate_cluster_joins_total " + std::to_string(joins_) + "\n";
    out += "# TYPE cellgate_cluster_etcd_failures_total counter\ncellgate_cluster_etcd_failures_total " +
           std::to_string(failures_) + "\n";
}

}  // namespace cellgate::cluster
