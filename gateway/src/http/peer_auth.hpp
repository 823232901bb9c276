#pragma once

// How cluster nodes know each other's requests (security review turn 3, H4).
//
// A node never sends a tenant's token to a peer. A request it makes of a
// peer (the internal hop, a list's fan-out, a create relayed to the node that
// made what it names) drops the caller's credentials (Authorization,
// X-API-Key, ?token=) and instead carries
//
//   X-Cellgate-Tenant: <hex tenant>.<hex token name>     (the caller, as checked here)
//   X-Cellgate-Peer:   v1 from=<tag> to=<tag> at=<unix s> nonce=<32 hex> sig=<64 hex>
//
// where sig is HMAC-SHA256 under the cluster secret over from, to, at, the
// nonce, the method, the target and the values of X-Cellgate-Hop,
// X-Cellgate-Scope and X-Cellgate-Tenant. The receiving node believes those
// three headers only with a good signature addressed to its own tag, at most
// 30 s from its clock, whose nonce it has not seen; the tenant must be one of
// its own tokens file. (A client may send X-Cellgate-Scope or X-Cellgate-Hop
// with its own token: they only narrow what it is answered. X-Cellgate-Tenant
// without a good signature is refused.) A listener that etcd wrongly names as a peer receives
// no token, and nothing it can replay: the signature names the node it was
// meant for, expires in 30 s and is taken once. Per-sandbox credentials of
// the E2B sandbox plane (X-Access-Token) still go to the sandbox's node,
// which alone can check them; they open that sandbox only.
//
// What it does not do: encrypt, or sign bodies. The hop relays bodies and
// WebSockets as they stream, so a network that can change bytes between two
// nodes can change a body; keep node-to-node traffic on a network you trust
// (docs/cluster.md).

#include "http/auth.hpp"
#include "http/http_types.hpp"
#include "util/cluster_secret.hpp"

#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace cellgate::http {

inline constexpr const char* peer_header = "X-Cellgate-Peer";
inline constexpr const char* tenant_header = "X-Cellgate-Tenant";
inline constexpr const char* scope_header = "X-Cellgate-Scope";

// `target` without its `token` query parameter (a browser's credential in a
// WebSocket URL), so no token travels in a request line either.
std::string without_token_query(std::string_view target);

class peer_auth {
public:
    static constexpr std::chrono::seconds max_skew{30};
    // Signatures remembered at once (30 s of them); past it, peer requests are refused.
    static constexpr std::size_t max_remembered = 65536;
    using clock_fn = std::function<std::int64_t()>;  // unix seconds

    peer_auth(std::string tag, std::shared_ptr<const util::cluster_secret> secret, clock_fn now = {});

    const std::string& tag() const { return tag_; }

    // `h` made into this node's request of the peer `to_tag`: the caller's
    // credentials removed (Authorization, X-API-Key, Cookie, ?token=), and
    // X-Cellgate-Tenant for `who` (null: none), then X-Cellgate-Peer over it
    // all. X-Cellgate-Hop and X-Cellgate-Scope are signed as `h` has them.
    void sign(boost::beast::http::request_header<>& h, const std::string& to_tag, const identity* who) const;
    // The same as headers for util::http_call (the target is taken as given: no ?token= in it).
    std::vector<std::pair<std::string, std::string>> headers(const std::string& method, const std::string& target,
                                                             const std::string& to_tag, const std::string& hop,
                                                             const std::string& scope, const identity* who) const;

    struct verdict {
        enum class kind {
            none,     // an ordinary request (its token is checked as usual)
            ok,       // a peer's request, signed; `who` when it vouches for a tenant
            refused,  // a cluster header without a good signature: 403, `why`
        } what = kind::none;
        std::optional<identity> who;
        std::string why;
    };
    verdict check(const boost::beast::http::request_header<>& h, const authenticator& auth);

    std::uint64_t refused() const { return refused_.load(); }
    std::uint64_t accepted() const { return accepted_.load(); }
    // Prometheus: cellgate_cluster_peer_requests_total{outcome}.
    void render(std::string& out) const;

private:
    std::string mac(std::string_view from, std::string_view to, std::string_view at, std::string_view nonce,
                    std::string_view method, std::string_view target, std::string_view hop, std::string_view scope,
                    std::string_view tenant) const;
    verdict refuse(std::string why);
    // False when `sig` was seen within the window, or too many are held.
    bool remember(const std::string& sig, std::int64_t now);

    const std::string tag_;
    const std::shared_ptr<const util::cluster_secret> secret_;
    clock_fn now_;
    std::mutex mutex_;
    std::unordered_set<std::string> seen_;                  // under mutex_
    std::deque<std::pair<std::int64_t, std::string>> order_;  // (expiry, sig), oldest first; under mutex_
    std::atomic<std::uint64_t> refused_{0}, accepted_{0};
};

}  // namespace cellgate::http
