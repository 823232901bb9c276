#pragma once

// The internal hop (issue 16, Part 2): a cluster node asked for an id that
// another node made passes the request, as it came, to that node and relays
// the answer, WebSockets and event streams included. The router sends each id
// to its owner already; the hop is for clients that reach a node directly (a
// node's own URL, a stale connection, a load balancer that routes by
// connection only).
//
// The caller's token is checked here; the owner gets no token, but this
// node's signed word for the caller (http/peer_auth.hpp: the cluster shares
// one tokens file and a secret). The E2B sandbox plane's per-sandbox tokens
// are known only to the owner, which checks them. The forwarded request
// carries X-Cellgate-Hop (signed), and a request carrying it is never passed
// on again, so a stale view of the cluster cannot make a loop.

#include "http/peer_auth.hpp"

#include <boost/beast/http.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace cellgate::http {

inline constexpr const char* hop_header = "X-Cellgate-Hop";

// The node tag of the id the request names (its first group, 8 hex digits),
// or empty: from the path (/api/kernels/<id>…, /api/sessions/<id>…,
// /api/contents/<id>…, /files/<id>…, /v1/sessions/<id>…, /v1/snapshots/<id>,
// /e2b/sandboxes/<id>…, /e2b/v2/sandboxes/<id>…; a cluster node's terminal
// name, <tag>-…, in /api/terminals/<name> and /terminals/websocket/<name>), else the E2B sandbox
// plane's E2b-Sandbox-Id header or <port>-<id>.<domain> Host. The same rules
// as the router's (deploy/cellgate-router).
std::string id_tag_of(const boost::beast::http::request_header<>& h, std::string_view raw_path);

// The node tag of `id` when it is exactly an id of the shape 8-4-4-4-12
// (lowercase hex), as a body names one (a snapshot to start from); else empty.
std::string node_tag_of_id(std::string_view id);

struct hop_owner {
    enum class kind { self, peer, gone, unknown } what = kind::unknown;
    std::string address;  // host:port, for a peer
};

// Set on a cluster node: its own tag, who holds a tag, and how peers' requests are signed and checked.
struct hop_rules {
    std::string tag;
    std::function<hop_owner(const std::string& tag)> locate;
    std::shared_ptr<peer_auth> peers;
};

// The request's head as it goes to the owner `to_tag`: X-Cellgate-Hop names
// this node, X-Forwarded-For gains the caller's address, a request that does
// not upgrade asks the owner to close after its answer (the relay then ends),
// and `peers` signs it for the owner, with no credential of the caller's and
// `who` vouched for (null: none).
std::string hop_request_head(boost::beast::http::request_header<> h, const std::string& remote, const peer_auth& peers,
                             const std::string& to_tag, const identity* who);

}  // namespace cellgate::http
