// Lists that span a cluster (issue 16, Part 2): a node answers with its own
// kernels or sessions and those of each live peer the cluster's index names
// as holding some of the caller's, asked over HTTP off the io threads. A
// peer is asked for the caller under this node's signature, never with the
// caller's token (http/peer_auth.hpp; the cluster shares one tokens file).
#include "kit/services.hpp"

#include "http/hop.hpp"
#include "util/http_client.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace cellgate::kit {

using http::reply_fn;
using http::request_ptr;

std::vector<std::pair<std::string, std::string>> peer_headers(services& s, const request_ptr& req,
                                                              const std::string& method, const std::string& target,
                                                              const std::string& to_tag, const std::string& hop,
                                                              const std::string& scope) {
    // Never the caller's token (review turn 3, H4): the peer gets this node's
    // signed word for the caller, bound to that peer, this request and 30 s.
    if (!s.peer_auth) throw util::http_failure("this node has no cluster secret, so it asks no peer");
    return s.peer_auth->headers(method, target, to_tag, hop, scope, &req->who);
}

util::http_reply call_peer(const std::string& address, const std::string& method, const std::string& target,
                           const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
                           std::chrono::milliseconds timeout) {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) throw util::http_failure("no port in the address '" + address + "'");
    return util::http_call(method, address.substr(0, colon), address.substr(colon + 1), target, headers, body, timeout);
}

peer_answers ask_peers(services& s, const request_ptr& req,
                       const std::vector<std::pair<std::string, std::string>>& peers, const std::string& target_asked,
                       const std::string& member) {
    peer_answers out;
    const auto target = http::without_token_query(target_asked);
    for (const auto& [tag, address] : peers) {
        try {
            const auto headers = peer_headers(s, req, "GET", target, tag, "", "node");
            const auto r = call_peer(address, "GET", target, headers, "", std::chrono::seconds(3));
            auto part = http::json_nesting_within(r.body, http::max_body_json_depth)
                            ? nlohmann::json::parse(r.body, nullptr, false)
                            : nlohmann::json(nlohmann::json::value_t::discarded);
            if (r.status == 200 && !part.is_discarded() && (member.empty() || part.is_object())) {
                auto& items = member.empty() ? part : part[member];
                if (items.is_array()) {
                    out.parts.emplace_back(tag, std::move(items));
                    continue;
                }
            }
            // A peer that refuses this node's signature (another cluster
            // secret, clocks 30 s apart): said here, counted there.
            if (r.status == 403 && part.is_object() && part.value("message", std::string()).starts_with("Not a request"))
                spdlog::warn("cluster: node {} refused this node's signed request: {}", tag,
                             part.value("message", std::string()).substr(0, 300));
        } catch (const util::http_failure& e) {
            spdlog::warn("cluster: node {} did not answer {}: {}", tag, target, e.what());
        }
        out.unreachable += (out.unreachable.empty() ? "" : ",") + tag;
    }
    return out;
}

void reply_from_peer(services& s, const request_ptr& req, const std::string& tag, const std::string& address,
                     const std::string& target_asked, const std::string& body, std::chrono::seconds timeout,
                     const std::string& failed, const reply_fn& reply) {
    const auto target = http::without_token_query(target_asked);
    try {
        auto headers = peer_headers(s, req, std::string(req->req.method_string()), target, tag, s.node_tag, "");
        headers.emplace_back("Content-Type", "application/json");
        const auto r = call_peer(address, std::string(req->req.method_string()), target, headers, body, timeout);
        if (!http::json_nesting_within(r.body, http::max_body_json_depth))
            throw util::http_failure("its answer nested too deeply");
        auto answer = nlohmann::json::parse(r.body, nullptr, false);
        if (answer.is_discarded()) throw util::http_failure("its answer was not JSON");
        reply(http::json_response(r.status, answer));
    } catch (const util::http_failure& e) {
        reply(http::error_response(502, failed + ", which did not answer: " + e.what()));
    }
}

bool relay_to_maker(services& s, const request_ptr& req, const std::string& id, reply_fn& reply) {
    if (!s.cluster_peers || s.node_tag.empty() || !http::header_value(req->req, "x-cellgate-hop").empty()) return false;
    const auto tag = http::node_tag_of_id(id);
    if (tag.empty() || tag == s.node_tag) return false;
    const auto peers = s.cluster_peers();
    if (!peers) return false;
    const auto it = std::find_if(peers->begin(), peers->end(), [&](const auto& p) { return p.first == tag; });
    if (it == peers->end()) return false;
    run_file_work(s, req, std::move(reply), [&s, req, tag, address = it->second](const reply_fn& rep) {
        reply_from_peer(s, req, tag, address, std::string(req->req.target()), req->req.body(), std::chrono::seconds(120),
                        "This names something node " + tag + " made", rep);
    });
    return true;
}

std::vector<std::pair<std::string, std::string>> holding_peers(services& s, const request_ptr& req,
                                                               const std::string& what) {
    std::optional<std::vector<std::pair<std::string, std::string>>> peers;
    std::string why;
    try {
        peers = s.cluster_holders ? s.cluster_holders(req->who.tenant) : s.cluster_peers();
    } catch (const std::exception& e) {
        why = std::string(" (etcd: ") + e.what() + ")";
    }
    if (!peers)
        throw api_exception(503, what + ", which this node cannot reach now" + why + "; open sessions keep working");
    return std::move(*peers);
}

std::string join_holders_parts(services& s, const request_ptr& req, nlohmann::json& into, const std::string& member) {
    const auto peers = holding_peers(s, req, "Lists span the cluster and need etcd");
    auto asked = ask_peers(s, req, peers, std::string(req->req.target()), member);
    for (auto& [tag, items] : asked.parts)
        for (auto& item : items) into.push_back(std::move(item));
    return asked.unreachable;
}

void reply_list(services& s, const request_ptr& req, reply_fn reply, nlohmann::json local, const std::string& member,
                const std::string& order) {
    if (!s.cluster_peers || http::header_value(req->req, "x-cellgate-scope") == "node")
        return reply(http::json_response(200, local));
    if (!s.cluster_peers())  // fenced: answered at once, from the last view
        return reply(http::error_response(503, "Lists span the cluster and need etcd, which this node cannot reach "
                                               "now; open sessions keep working"));
    run_file_work(s, req, std::move(reply), [&s, req, local = std::move(local), member, order](const reply_fn& rep) mutable {
        auto& into = member.empty() ? local : local[member];
        const auto unreachable = join_holders_parts(s, req, into, member);
        if (!order.empty() && into.is_array())
            std::stable_sort(into.begin(), into.end(), [&order](const nlohmann::json& a, const nlohmann::json& b) {
                return a.value(order, std::string()) < b.value(order, std::string());
            });
        auto res = http::json_response(200, local);
        if (!unreachable.empty()) res.headers.emplace_back("X-Cellgate-Unreachable", unreachable);
        rep(std::move(res));
    });
}

}  // namespace cellgate::kit
