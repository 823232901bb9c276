#pragma once

#include "cluster/etcd_client.hpp"
#include "util/cluster_secret.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <set>
#include <vector>

namespace cellgate::cluster {

// One node's place in the cluster (issue 16, Part 2): its record under
// `<prefix>nodes/<tag>` on a lease of its own, kept alive every third of the
// TTL and rewritten each time with the node's load (address, admitted and
// maximum kernels, warm sandboxes ready), so the record disappears when the
// node dies and the router and placement see current figures while it lives.
//
// It also keeps `<prefix>tags/<tag>` without a lease, so the tag is known
// after the node is gone (its ids answer 410, not 404).
//
// Fencing: a node whose last keepalive etcd acknowledged is two thirds of a
// TTL old or more (or that never joined) admits no new session: its lease may
// be about to lapse, and others will treat its ids as gone. Its open sessions
// keep working: the data path never asks etcd. When etcd answers again it
// re-grants a lease and re-registers. A clean stop revokes the lease, so the
// record goes at once.
//
// Cluster-wide tenant quotas: each admitted kernel holds a key
// `<prefix>admit/<tenant>/<tag>-…` on its node's lease. A create reserves
// its keys by compare-and-swap: it counts the tenant's keys, and writes its
// own only if `<prefix>quota/<tenant>` (bumped by every reservation) has not
// changed since it counted, else counts again. A dead node's keys go with
// its lease. Each refresh makes the node's keys match its kernels (keys of
// kernels that ended are deleted once two seconds old; kernels taken back
// after a restart or a new lease get theirs), so a session that ends frees
// its place within a third of the TTL (at once when nudged).
//
// The index of who holds what: `<prefix>holders/<tenant>/<tag>` on the
// node's lease while the node holds at least one of the tenant's kernels
// (running, starting or paused; Jupyter and `/v1` sessions, terminals and
// workspaces all live beside a kernel) or snapshots. A reservation writes it before the
// kernel is admitted, so a list made anywhere right after a create finds its
// node; each refresh rebuilds it from the node's kernels (a node that comes
// back, or gets a new lease, writes it again) and removes the tenants that
// have none left. A tenant's list asks only the nodes the index names, so a
// cluster's lists cost what the tenant's own spread costs, not the node
// count, and a hung node delays only its own tenants' lists.
//
// Authentication (security review turn 3, H4): etcd is reached over TLS
// with this node's client certificate, and every record a node writes under
// `<prefix>nodes/` carries an HMAC of its tag and address under the cluster
// secret (`sig`); a record without a good one is not a peer, whoever wrote
// it. `<prefix>secret-check` holds the HMAC of a fixed text, written by the
// first node: a node whose secret does not give it does not join (it says so
// and is fenced), since its peers would refuse all it signs.
//
// The loop runs on a thread of its own (etcd calls block).
// A node record read from etcd, before the node uses it: its key's tag is
// the record's and 8 lowercase hex digits, and its address is host:port in
// a strict grammar (a dotted IPv4 address, a bracketed IPv6 one or a DNS
// name; a port 1-65535). Anything else is not a peer (security review turn
// 3, H4): no request, header or token goes to it.
bool valid_peer_address(std::string_view address);
bool valid_peer_record(std::string_view key_tag, const std::string& tag, const std::string& address);

class membership {
public:
    struct options {
        std::vector<std::string> etcd;       // http://host:port of the members
        std::string tag;                     // this node's id tag
        std::string address;                 // where peers and the router reach this node
        std::chrono::seconds ttl{10};        // the lease's TTL
        std::string prefix = "/cellgate/";   // every key of this cluster starts with it
        std::shared_ptr<const boost::asio::ssl::context> tls;  // https:// members: CA, certificate, key
        std::shared_ptr<const util::cluster_secret> secret;     // signs and checks node records (required)
    };
    using clock = std::chrono::steady_clock;

    // `figures`: the node's live figures, merged into its record on each refresh.
    membership(options opts, std::function<nlohmann::json()> figures);
    ~membership();
    membership(const membership&) = delete;
    membership& operator=(const membership&) = delete;

    void start();
    void stop();  // leaves cleanly (lease revoked); idempotent

    // Why this node admits no new session now, or nothing.
    std::optional<std::string> refusal() const;

    struct reservation {
        enum class outcome { admitted, over_quota, unavailable } result = outcome::admitted;
        std::string why;
    };
    // `count` more kernels for `tenant` within `limit` across the cluster
    // (0: no cluster-wide cap, only the fencing check). Blocks for etcd round
    // trips (three, more on contention; 1.5 s a member at most).
    reservation reserve(const std::string& tenant, std::size_t count, std::size_t limit);
    // The node's kernels per tenant, for the refresh's reconciliation. Set before start().
    void count_kernels_with(std::function<std::map<std::string, std::size_t>()> fn) { local_counts_ = std::move(fn); }
    // The tenants the node holds anything of (kernels, snapshots), for the
    // index's reconciliation. Set before start(); without it, the tenants
    // with kernels.
    void index_tenants_with(std::function<std::set<std::string>()> fn) { held_tenants_ = std::move(fn); }
    // Refresh now (a kernel ended: its quota key can go).
    void nudge();

    // The other live nodes as of the last refresh (tag, address), for
    // cluster-wide lists; nothing while this node is fenced (lost etcd).
    struct peer {
        std::string tag, address;
    };
    std::optional<std::vector<peer>> peers() const;
    // The live peers that hold some of `tenant`'s kernels, from the index
    // (one etcd read, blocking); nothing while this node is fenced. Throws
    // when etcd does not answer.
    std::optional<std::vector<peer>> holders(const std::string& tenant);
    // Who holds ids with `tag`, as of the last refresh: this node, a live
    // peer (its address), a node that has left (gone), or no node ever
    // (unknown). Answers from the last view even while fenced: the data path
    // never needs etcd.
    struct owner {
        enum class kind { self, peer, gone, unknown } what = kind::unknown;
        std::string address;
    };
    owner locate(const std::string& tag) const;
    std::string node_key() const { return opts_.prefix + "nodes/" + opts_.tag; }
    // Prometheus: cellgate_cluster_member, cellgate_cluster_etcd_ok_age_seconds, …
    void render(std::string& out) const;

private:
    void run();
    bool refresh();  // one round: join or keep alive, then write the record; false: etcd failed
    std::string record() const;
    // Throws unless `<prefix>secret-check` is this node's secret's (written when absent).
    void check_secret();
    void reconcile(std::int64_t lease);
    std::string admit_prefix(const std::string& tenant) const;
    std::string holder_key(const std::string& tenant_hex) const;
    // Puts this node into the index for the tenant (hex) unless it is there
    // on `lease` already (serialised by reserve_mutex_).
    void hold(const std::string& tenant_hex, std::int64_t lease);

    options opts_;
    std::function<nlohmann::json()> figures_;
    std::function<std::map<std::string, std::size_t>()> local_counts_;
    std::function<std::set<std::string>()> held_tenants_;
    etcd_client etcd_;         // the loop thread's
    etcd_client quota_etcd_;   // reservations', under reserve_mutex_
    std::mutex reserve_mutex_;
    etcd_client index_etcd_;  // lists' reads of the index, under index_mutex_
    std::mutex index_mutex_;
    struct index_entry {
        std::int64_t lease = 0;
        std::int64_t at = 0;  // unix seconds of the last write
    };
    std::map<std::string, index_entry> holding_;  // tenant (hex) → this node's index key; under mutex_
    std::uint64_t next_key_ = 0;  // under reserve_mutex_ (reconcile: loop thread, its own counter below)
    std::uint64_t next_fill_ = 0;
    const std::string key_nonce_;  // tells this process's keys from an earlier one's
    bool nudged_ = false;          // under mutex_
    std::vector<peer> peers_;      // under mutex_
    std::vector<std::string> known_tags_;  // every tag under <prefix>tags/, sorted; under mutex_
    std::thread thread_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::int64_t lease_ = 0;          // loop thread only
    std::int64_t shared_lease_ = 0;   // the same, for reservations: under mutex_
    std::optional<clock::time_point> last_ok_;  // under mutex_
    std::string last_error_;                    // under mutex_
    std::uint64_t joins_ = 0, failures_ = 0;    // under mutex_
    std::uint64_t forged_ = 0;                  // node records refused for their signature; under mutex_
    bool secret_mismatch_ = false;              // under mutex_
    const std::string started_;
};

}  // namespace cellgate::cluster
