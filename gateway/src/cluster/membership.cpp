#include "cluster/membership.hpp"

#include "cellgate/protocol/message.hpp"
#include "util/encoding.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <thread>

namespace cellgate::cluster {

namespace {

constexpr std::string_view record_purpose = "cellgate node record v1";
constexpr std::string_view secret_check_purpose = "cellgate cluster secret check v1";

// A node's tag, as kernels/node_id makes it: 8 lowercase hex digits.
bool valid_tag(std::string_view t) {
    return t.size() == 8 && std::all_of(t.begin(), t.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

bool valid_peer_address(std::string_view a) {
    const auto colon = a.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    const auto host = a.substr(0, colon), port = a.substr(colon + 1);
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return false;
    const auto p = std::stoul(std::string(port));
    if (p == 0 || p > 65535) return false;
    if (host.front() == '[') {
        if (host.size() < 4 || host.back() != ']') return false;
        const auto inner = host.substr(1, host.size() - 2);
        return std::all_of(inner.begin(), inner.end(), [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
        });
    }
    if (host.size() > 253) return false;
    // A DNS name or a dotted IPv4 address: labels of letters, digits and '-', not at a label's ends.
    std::size_t label = 0;
    for (std::size_t i = 0; i <= host.size(); ++i) {
        const char c = i < host.size() ? host[i] : '.';
        if (c == '.') {
            if (label == 0 || label > 63 || host[i - 1] == '-') return false;
            label = 0;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c == '-' && label > 0)) {
            ++label;
        } else {
            return false;
        }
    }
    return true;
}

bool valid_peer_record(std::string_view key_tag, const std::string& tag, const std::string& address) {
    return key_tag == tag && valid_tag(tag) && valid_peer_address(address);
}

membership::membership(options opts, std::function<nlohmann::json()> figures)
    : opts_(std::move(opts)), figures_(std::move(figures)), etcd_(opts_.etcd, opts_.tls),
      quota_etcd_(opts_.etcd, opts_.tls), index_etcd_(opts_.etcd, opts_.tls),
      key_nonce_(protocol::make_uuid().substr(0, 8)), started_(protocol::now_iso8601()) {
    if (opts_.ttl < std::chrono::seconds(2)) opts_.ttl = std::chrono::seconds(2);
    if (!opts_.secret) throw std::invalid_argument("a cluster node needs the cluster secret");
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
    r["sig"] = opts_.secret->sign(record_purpose, {opts_.tag, opts_.address});
    return r.dump();
}

void membership::check_secret() {
    const auto key = opts_.prefix + "secret-check";
    const auto mine = opts_.secret->sign(secret_check_purpose, {opts_.prefix});
    auto held = etcd_.get(key);
    if (!held) {
        etcd_.put_if_unchanged(key, 0, {{key, mine, 0}});
        held = etcd_.get(key);
    }
    const bool matches = held && opts_.secret->verify(held->value, secret_check_purpose, {opts_.prefix});
    {
        std::lock_guard lock(mutex_);
        secret_mismatch_ = !matches;
    }
    if (!matches)
        throw etcd_error("this node's cluster secret is not the cluster's (" + key +
                         " differs): its peers would refuse every request it signs, so it does not join");
}

bool membership::refresh() {
    try {
        if (lease_ != 0 && etcd_.keepalive(lease_) <= 0) {
            spdlog::warn("cluster: the lease of node {} had expired; joining again", opts_.tag);
            lease_ = 0;
        }
        bool joined = false;
        check_secret();
        if (lease_ == 0) {
            lease_ = etcd_.grant(opts_.ttl);
            joined = true;
            // Kept without a lease: once this node is gone, the router can
            // still tell its ids (410, gone) from ids no node ever made (404).
            etcd_.put(opts_.prefix + "tags/" + opts_.tag, nlohmann::json{{"tag", opts_.tag}, {"address", opts_.address}}.dump());
        }
        {
            std::lock_guard lock(mutex_);
            shared_lease_ = lease_;
        }
        reconcile(lease_);
        std::vector<peer> others;
        const auto nodes_root = opts_.prefix + "nodes/";
        for (const auto& kv : etcd_.range_prefix(nodes_root)) {
            const auto rec = nlohmann::json::parse(kv.value, nullptr, false);
            const auto text = [&rec](const char* name) {
                const auto it = rec.find(name);
                return it != rec.end() && it->is_string() ? it->get<std::string>() : std::string();
            };
            if (!rec.is_object()) continue;
            const auto tag = text("tag"), address = text("address"), sig = text("sig");
            if (tag == opts_.tag) continue;
            if (!valid_peer_record(std::string_view(kv.key).substr(nodes_root.size()), tag, address)) {
                spdlog::warn("cluster: ignoring a node record that is not one (key '{}')", kv.key.substr(0, 200));
                continue;
            }
            if (!opts_.secret->verify(sig, record_purpose, {tag, address})) {
                std::lock_guard lock(mutex_);
                if (forged_++ % 100 == 0)
                    spdlog::warn("cluster: ignoring the record of node {} at {}: it is not signed with the cluster "
                                 "secret ({} so far)", tag, address.substr(0, 100), forged_);
                continue;
            }
            others.push_back({tag, address});
        }
        std::vector<std::string> tags;
        const auto tags_root = opts_.prefix + "tags/";
        for (const auto& kv : etcd_.range_prefix(tags_root))
            if (valid_tag(kv.key.substr(tags_root.size()))) tags.push_back(kv.key.substr(tags_root.size()));
        std::sort(tags.begin(), tags.end());
        // The record last: the router sends creates to a node once it is
        // there, and by then the node has its peers and admits.
        etcd_.put(node_key(), record(), lease_);
        std::lock_guard lock(mutex_);
        peers_ = std::move(others);
        known_tags_ = std::move(tags);
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
        if (wake_.wait_for(lock, ok ? interval : interval / 2, [this] { return stopping_ || nudged_; }) && stopping_)
            break;
        nudged_ = false;
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

void membership::nudge() {
    {
        std::lock_guard lock(mutex_);
        nudged_ = true;
    }
    wake_.notify_all();
}

namespace {

std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string membership::admit_prefix(const std::string& tenant) const {
    // Tenants are names from the tokens file: hex keeps any of them one key segment.
    return opts_.prefix + "admit/" + cellgate::hex_encode(tenant) + "/";
}

membership::reservation membership::reserve(const std::string& tenant, std::size_t count, std::size_t limit) {
    if (auto why = refusal()) return {reservation::outcome::unavailable, *why};
    const auto tenant_hex = cellgate::hex_encode(tenant);
    std::int64_t lease = 0;
    bool indexed = false;  // this node is in the index for the tenant already, on its lease
    {
        std::lock_guard lock(mutex_);
        lease = shared_lease_;
        if (const auto it = holding_.find(tenant_hex); it != holding_.end() && it->second.lease == lease) {
            it->second.at = unix_now();
            indexed = true;
        }
    }
    // A tenant without a cluster-wide cap, already indexed here: no etcd
    // round trip, and no wait behind another tenant's compare-and-swap.
    if (indexed && limit == 0) return {};
    std::lock_guard serial(reserve_mutex_);
    try {
        if (!indexed) hold(tenant_hex, lease);
    } catch (const std::exception& e) {
        spdlog::warn("cluster: node {}: the index could not name it for tenant {}: {}", opts_.tag, tenant, e.what());
        return {reservation::outcome::unavailable,
                std::string("The cluster's index could not be updated (etcd: ") + e.what() + ")"};
    }
    if (limit == 0) return {};
    const auto quota_key = opts_.prefix + "quota/" + tenant_hex;
    // Contention (other nodes reserving for the tenant at once) makes the
    // compare-and-swap fail; try again, with a short random pause so the
    // contenders spread out, for up to three seconds.
    const auto deadline = clock::now() + std::chrono::seconds(3);
    thread_local std::minstd_rand jitter(std::random_device{}());
    try {
        for (int attempt = 0;; ++attempt) {
            if (attempt > 0) {
                if (clock::now() >= deadline) break;
                std::uniform_int_distribution<int> pause(1, 2 + 4 * std::min(attempt, 5));
                std::this_thread::sleep_for(std::chrono::milliseconds(pause(jitter)));
            }
            const auto stamp = quota_etcd_.get(quota_key);
            const auto held = quota_etcd_.count_prefix(admit_prefix(tenant));
            if (held + count > limit)
                return {reservation::outcome::over_quota,
                        "Session limit reached for this token across the cluster (" + std::to_string(limit) + "; " +
                            std::to_string(held) + " held" +
                            (count > 1 ? ", " + std::to_string(count) + " asked for, none was started" : "") + ")"};
            std::vector<etcd_client::put_op> puts;
            puts.push_back({quota_key, nlohmann::json{{"held", held + count}}.dump(), 0});
            const auto value = nlohmann::json{{"node", opts_.tag}, {"at", unix_now()}}.dump();
            for (std::size_t i = 0; i < count; ++i)
                puts.push_back({admit_prefix(tenant) + opts_.tag + "-" + key_nonce_ + "-r" + std::to_string(next_key_++),
                                value, lease});
            if (quota_etcd_.put_if_unchanged(quota_key, stamp ? stamp->mod_revision : 0, puts)) return {};
        }
        spdlog::warn("cluster: node {}: a reservation for tenant {} lost its compare-and-swap for 3 s", opts_.tag,
                     tenant);
        return {reservation::outcome::unavailable,
                "Too many creates for this token at once across the cluster; try again"};
    } catch (const std::exception& e) {
        spdlog::warn("cluster: node {}: the quota of tenant {} could not be checked: {}", opts_.tag, tenant, e.what());
        return {reservation::outcome::unavailable,
                std::string("The cluster's quota could not be checked (etcd: ") + e.what() + ")"};
    }
}

void membership::reconcile(std::int64_t lease) {
    if (!local_counts_) return;
    const auto local = local_counts_();
    const auto root = opts_.prefix + "admit/";
    const auto mine_marker = "/" + opts_.tag + "-";
    // tenant (hex) → this node's keys, oldest first
    std::map<std::string, std::vector<std::pair<std::int64_t, std::string>>> mine;
    for (const auto& kv : etcd_.range_prefix(root)) {
        const auto rest = kv.key.substr(root.size());
        const auto slash = rest.find('/');
        if (slash == std::string::npos || rest.compare(slash, mine_marker.size(), mine_marker) != 0) continue;
        const auto v = nlohmann::json::parse(kv.value, nullptr, false);
        const std::int64_t at = v.is_object() ? v.value("at", std::int64_t{0}) : 0;
        mine[rest.substr(0, slash)].emplace_back(at, kv.key);
    }
    std::map<std::string, std::size_t> want;
    for (const auto& [tenant, n] : local) want[cellgate::hex_encode(tenant)] = n;
    for (const auto& [t, keys] : mine) want.try_emplace(t, 0);
    const auto now = unix_now();
    for (const auto& [t, n] : want) {
        auto& have = mine[t];
        std::sort(have.begin(), have.end());
        if (have.size() < n) {
            // Kernels this node holds without a key (taken back after a
            // restart, or keys lost with an expired lease).
            const auto value = nlohmann::json{{"node", opts_.tag}, {"at", now}}.dump();
            for (auto i = have.size(); i < n; ++i)
                etcd_.put(opts_.prefix + "admit/" + t + "/" + opts_.tag + "-" + key_nonce_ + "-f" +
                              std::to_string(next_fill_++),
                          value, lease);
        } else {
            // Keys of kernels that ended; never one younger than two seconds,
            // which may be a reservation whose kernel is being admitted now.
            auto surplus = have.size() - n;
            for (const auto& [at, key] : have) {
                if (surplus == 0 || now - at < 2) break;
                etcd_.erase(key);
                --surplus;
            }
        }
    }

    // The index: this node under every tenant it holds a kernel of, on the
    // current lease, and under no other (a key written in the last two
    // seconds stays: its kernel may be being admitted now).
    const auto index_root = opts_.prefix + "holders/";
    const auto suffix = "/" + opts_.tag;
    std::map<std::string, std::int64_t> listed;  // tenant (hex) → the lease of this node's key
    for (const auto& kv : etcd_.range_prefix(index_root))
        if (kv.key.size() > index_root.size() + suffix.size() && kv.key.ends_with(suffix))
            listed[kv.key.substr(index_root.size(), kv.key.size() - index_root.size() - suffix.size())] = kv.lease;
    std::set<std::string> wanted;
    if (held_tenants_) wanted = held_tenants_();
    else
        for (const auto& [tenant, n] : local)
            if (n > 0) wanted.insert(tenant);
    for (const auto& tenant : wanted) {
        const auto t = cellgate::hex_encode(tenant);
        if (const auto it = listed.find(t); it == listed.end() || it->second != lease) {
            std::lock_guard serial(reserve_mutex_);
            {
                std::lock_guard lock(mutex_);
                holding_.erase(t);  // what etcd has, not what was written, decides
            }
            hold(t, lease);
        }
        listed.erase(t);
    }
    for (const auto& [t, key_lease] : listed) {
        std::lock_guard serial(reserve_mutex_);
        {
            std::lock_guard lock(mutex_);
            if (const auto it = holding_.find(t); it != holding_.end() && now - it->second.at < 2) continue;
            holding_.erase(t);
        }
        etcd_.erase(holder_key(t));
    }
}

std::string membership::holder_key(const std::string& tenant_hex) const {
    return opts_.prefix + "holders/" + tenant_hex + "/" + opts_.tag;
}

void membership::hold(const std::string& tenant_hex, std::int64_t lease) {
    {
        std::lock_guard lock(mutex_);
        if (const auto it = holding_.find(tenant_hex); it != holding_.end() && it->second.lease == lease) {
            it->second.at = unix_now();
            return;
        }
    }
    // The reservations' client: its callers (a reservation, the loop's
    // reconcile) hold reserve_mutex_.
    quota_etcd_.put(holder_key(tenant_hex), nlohmann::json{{"node", opts_.tag}}.dump(), lease);
    std::lock_guard lock(mutex_);
    holding_[tenant_hex] = {lease, unix_now()};
}

std::optional<std::vector<membership::peer>> membership::holders(const std::string& tenant) {
    if (refusal()) return std::nullopt;
    const auto prefix = opts_.prefix + "holders/" + cellgate::hex_encode(tenant) + "/";
    std::vector<std::string> tags;
    {
        std::lock_guard serial(index_mutex_);
        for (const auto& kv : index_etcd_.range_prefix(prefix)) tags.push_back(kv.key.substr(prefix.size()));
    }
    std::sort(tags.begin(), tags.end());
    std::vector<peer> out;
    std::lock_guard lock(mutex_);
    for (const auto& p : peers_)
        if (std::binary_search(tags.begin(), tags.end(), p.tag)) out.push_back(p);
    return out;
}

std::optional<std::vector<membership::peer>> membership::peers() const {
    if (refusal()) return std::nullopt;
    std::lock_guard lock(mutex_);
    return peers_;
}

membership::owner membership::locate(const std::string& tag) const {
    if (tag == opts_.tag) return {owner::kind::self, opts_.address};
    std::lock_guard lock(mutex_);
    for (const auto& p : peers_)
        if (p.tag == tag) return {owner::kind::peer, p.address};
    if (std::binary_search(known_tags_.begin(), known_tags_.end(), tag)) return {owner::kind::gone, {}};
    return {};
}

std::optional<std::string> membership::refusal() const {
    std::lock_guard lock(mutex_);
    // The last failure says which: etcd down, etcd refusing this node's
    // certificate (TLS: …), or a cluster secret that is not the cluster's.
    const auto why = last_error_.empty() ? std::string() : " (" + last_error_ + ")";
    if (!last_ok_)
        return "This node has not joined its cluster yet: etcd has not answered it" + why +
               "; it admits no new session until it does";
    const auto age = clock::now() - *last_ok_;
    if (age >= opts_.ttl * 2 / 3)
        return "This node has lost etcd (no good answer for " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(age).count()) + " s" + why +
               "): it admits no new session until etcd answers again; open sessions keep working";
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
    out += "# HELP cellgate_cluster_forged_records_total node records ignored: not signed with the cluster secret\n"
           "# TYPE cellgate_cluster_forged_records_total counter\ncellgate_cluster_forged_records_total " +
           std::to_string(forged_) + "\n";
    out += "# HELP cellgate_cluster_secret_mismatch 1 while this node's cluster secret is not the cluster's\n"
           "# TYPE cellgate_cluster_secret_mismatch gauge\ncellgate_cluster_secret_mismatch " +
           std::string(secret_mismatch_ ? "1" : "0") + "\n";
}

}  // namespace cellgate::cluster
