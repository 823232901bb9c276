// Lists that span a cluster (issue 16, Part 2): a node answers with its own
// kernels or sessions and each live peer's, asked over HTTP with the caller's
// own credentials (the cluster shares one tokens file), off the io threads.
#include "api/api.hpp"

#include "util/http_client.hpp"

#include <spdlog/spdlog.h>

namespace cellgate::api {

using http::reply_fn;
using http::request_ptr;

std::vector<std::pair<std::string, std::string>> peer_headers(const request_ptr& req) {
    std::vector<std::pair<std::string, std::string>> headers = {{"X-Cellgate-Scope", "node"}};
    if (auto auth = http::header_value(req->req, "authorization"); !auth.empty())
        headers.emplace_back("Authorization", std::move(auth));
    else if (auto token = req->query_value("token"))
        headers.emplace_back("Authorization", "token " + *token);
    return headers;
}

void reply_list(services& s, const request_ptr& req, reply_fn reply, nlohmann::json local, const std::string& member) {
    if (!s.cluster_peers || http::header_value(req->req, "x-cellgate-scope") == "node")
        return reply(http::json_response(200, local));
    auto peers = s.cluster_peers();
    if (!peers)
        return reply(http::error_response(503, "Lists span the cluster and need etcd, which this node cannot reach "
                                               "now; open sessions keep working"));
    if (peers->empty()) return reply(http::json_response(200, local));
    auto headers = peer_headers(req);
    run_file_work(s, req, std::move(reply),
                  [req, local = std::move(local), member, peers = std::move(*peers), headers](const reply_fn& rep) mutable {
                      auto& into = member.empty() ? local : local[member];
                      std::string unreachable;
                      const std::string target(req->req.target());
                      for (const auto& [tag, address] : peers) {
                          const auto colon = address.rfind(':');
                          bool ok = false;
                          if (colon != std::string::npos) {
                              try {
                                  const auto r = util::http_call("GET", address.substr(0, colon), address.substr(colon + 1),
                                                                 target, headers, "", std::chrono::seconds(3));
                                  auto part = nlohmann::json::parse(r.body, nullptr, false);
                                  if (r.status == 200 && !part.is_discarded()) {
                                      const auto& items = member.empty() ? part : part[member];
                                      if (items.is_array()) {
                                          for (const auto& item : items) into.push_back(item);
                                          ok = true;
                                      }
                                  }
                              } catch (const util::http_failure& e) {
                                  spdlog::warn("cluster list: node {} did not answer: {}", tag, e.what());
                              }
                          }
                          if (!ok) unreachable += (unreachable.empty() ? "" : ",") + tag;
                      }
                      auto res = http::json_response(200, local);
                      if (!unreachable.empty()) res.headers.emplace_back("X-Cellgate-Unreachable", unreachable);
                      rep(std::move(res));
                  });
}

}  // namespace cellgate::api
