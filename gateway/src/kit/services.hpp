#pragma once

// The kit every surface shares (jupyter, v1, e2b, mcp, web): the services
// their handlers are given, the core's failures as HTTP statuses, file work
// off the io threads, the cluster's list join and relay, and the small
// parsers of queries and headers. A surface includes the kit and the core,
// never another surface (cmake/rooms.cmake).

#include "kit/request_models.hpp"
#include "contents/contents_store.hpp"
#include "core/files.hpp"
#include "core/network.hpp"
#include "core/executions.hpp"
#include "core/sessions.hpp"
#include "http/peer_auth.hpp"
#include "http/router.hpp"
#include "kernels/kernel_manager.hpp"
#include "kernels/session_registry.hpp"
#include "kit/upload_staging.hpp"
#include "metrics/metrics.hpp"
#include "templates/template_store.hpp"
#include "util/api_error.hpp"
#include "util/file_io_pool.hpp"
#include "util/http_client.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cellgate::core {
class runs;
class runtime_table;
}  // namespace cellgate::core

namespace cellgate::kit {

// What the REST handlers work with. Handlers are thin: they parse and check
// the request, call the kernel manager or the contents store, and shape the
// Jupyter models; they never touch ZMQ or the launcher directly.
struct services {
    kernels::kernel_manager& kernels;
    kernels::session_registry& sessions;
    metrics::registry& metrics;
    std::string version;
    util::file_io_pool* file_io = nullptr;  // file-system work runs here (inline when null)
    // A file in a JSON model: JupyterLab fetches bigger ones through /files/.
    std::size_t max_read_bytes = 32u << 20;
    std::size_t max_notebook_bytes = 32u << 20;  // parsed into a DOM: costs several times its size
    std::size_t max_model_text_bytes = 64u << 20;  // "content" once JSON-escaped
    std::size_t max_listed_entries = 5000;         // per directory model or /v1 listing
    core::network_settings* network = nullptr;  // sessions' networks (core/network.hpp); null: none
    // A cluster node's live peers (tag, address), for lists that span the
    // cluster; nothing when the node cannot reach etcd. Unset: one gateway alone.
    std::function<std::optional<std::vector<std::pair<std::string, std::string>>>()> cluster_peers{};
    // The live peers (tag, address) the cluster's index names as holding some
    // of the tenant's kernels: one etcd read, blocking (file-work threads
    // only); nothing while fenced; throws when etcd does not answer.
    std::function<std::optional<std::vector<std::pair<std::string, std::string>>>(const std::string& tenant)>
        cluster_holders{};
    std::string node_tag{};  // a cluster node's tag (the first group of the ids it makes); "" alone
    // Signs this node's requests of its peers (a cluster node's; http/peer_auth.hpp).
    std::shared_ptr<http::peer_auth> peer_auth{};
    // The core's front door: every surface starts its sessions here.
    core::sessions* core = nullptr;
    // And runs their cells here (core/executions.hpp).
    core::executions* cells = nullptr;
    // And its one-shot programs in other languages (core/runs.hpp); null: none.
    core::runs* runs = nullptr;
    core::runtime_table* runtimes = nullptr;
    // Each tenant's templates (templates/template_store.hpp); null: none.
    templates::template_store* templates = nullptr;
    // Each tenant's share of the disk archive uploads are staged on; null: none.
    std::shared_ptr<upload_staging> staging{};
};


// The HTTP answer to a kernel operation that did not happen: the one place
// the core's failure kinds become statuses (404, 400, 429, 503, 409, 500).
http::response failure_response(const kernels::failure& f);
// A refusal with its status and message, and Retry-After when it says when.
http::response refusal(unsigned status, const std::string& message, std::optional<std::chrono::seconds> retry_after);

// A workspace's errors as statuses (core/files.hpp).
using core::contents_status;
using core::guarded;
// Whether the client asked for Server-Sent Events (Accept: text/event-stream).
bool wants_event_stream(const http::request_ptr& req);

// A whole number from the query, `fallback` when absent; 400 when it is not one or past `max`.
std::uint64_t query_number(const http::request_ptr& req, const char* name, std::uint64_t fallback, std::uint64_t max);

// A /v1 session's model: id, kernel, state, times and limits.
nlohmann::json session_model(const kernels::kernel& k, const kernels::kernelspec* spec);
// Starts a /v1 session for the caller from a create body ({kernel,
// timeout_s, idle_timeout_s, …}, checked as POST /v1/sessions checks it: a
// bad field throws api_exception(400)), through the core.
void start_agent_session(services& s, const std::string& tenant, const nlohmann::json& body,
                         kernels::kernel_manager::done_kernel done);
// The session's workspace (core/files.hpp).
using core::open_files;

// Where a budgeted cell's cut stream is read whole: GET
// /v1/sessions/{id}/executions/{execution_id}/output?stream=…, as the cut text
// names it (core::cell_request::output_at). /v1, E2B and MCP cells.
std::function<std::string(const std::string& execution_id, std::string_view stream)> whole_output_at(const std::string& session_id);

// Shared by handlers: the calling tenant's kernel, or api_exception(404).
kernels::kernel_ptr kernel_or_404(services& s, const http::request_ptr& req, const std::string& id);

// Replies with a list: this node's `local`, and on a cluster node the part of
// each live peer that holds some of the caller's kernels by the cluster's
// index (the same GET, signed for the caller and never with its token, and
// `X-Cellgate-Scope: node`, which asks a node for its own part only), joined
// into the array `local[member]` ("" = `local` itself). Peers that do not
// answer are named in `X-Cellgate-Unreachable`; a node that has lost etcd
// answers 503.
// `order`: the items' field the joined list is sorted by ("" = as joined).
void reply_list(services& s, const http::request_ptr& req, http::reply_fn reply, nlohmann::json local,
                const std::string& member = "", const std::string& order = "");

// On a cluster node: when `id` (what a create names to start from, such as a
// snapshot) was made by another live node, relays the request as it came to
// that node (signed, vouching for the caller, X-Cellgate-Hop so it goes no further)
// and replies with its answer; true when it did. False here (no cluster, the
// id is this node's, its node is gone or unknown, or the request was itself
// relayed): the caller handles it.
bool relay_to_maker(services& s, const http::request_ptr& req, const std::string& id, http::reply_fn& reply);

// The request's method, with `body` to `target`, on the peer `tag` at
// `address` (signed, vouching for the caller, X-Cellgate-Hop so it goes no
// further), waiting at most `timeout` (file-work threads only):
// its JSON answer is the reply, or 502 "`failed`, which did not answer: …".
void reply_from_peer(services& s, const http::request_ptr& req, const std::string& tag, const std::string& address,
                     const std::string& target, const std::string& body, std::chrono::seconds timeout,
                     const std::string& failed, const http::reply_fn& reply);

// The same GET of each peer holding some of the caller's kernels (the
// cluster's index), `X-Cellgate-Scope: node`, their items appended to `into`
// (`member` of each answer, "" = the answer itself); blocking. Returns the
// tags that did not answer, comma-separated; api_exception(503) without etcd.
std::string join_holders_parts(services& s, const http::request_ptr& req, nlohmann::json& into,
                               const std::string& member = "");

// The live peers holding some of the caller's kernels (the cluster's index;
// blocking, file-work threads only), or api_exception(503): `what` (a clause
// that ends in "etcd"), which this node cannot reach now.
std::vector<std::pair<std::string, std::string>> holding_peers(services& s, const http::request_ptr& req,
                                                               const std::string& what);

// The headers a `method` request of `target` to the peer `to_tag` carries
// for the caller: never its credentials, but this node's signed word for it
// (http/peer_auth.hpp), with `hop` (X-Cellgate-Hop) and `scope`
// (X-Cellgate-Scope) as given ("" = none). Throws util::http_failure on a
// node without the cluster secret (no request goes).
std::vector<std::pair<std::string, std::string>> peer_headers(services& s, const http::request_ptr& req,
                                                              const std::string& method, const std::string& target,
                                                              const std::string& to_tag, const std::string& hop,
                                                              const std::string& scope);

// One request to a peer at `address` ("host:port"), blocking (file-work
// threads only); throws util::http_failure when no answer came.
util::http_reply call_peer(const std::string& address, const std::string& method, const std::string& target,
                           const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
                           std::chrono::milliseconds timeout);

// GET `target` of each peer (tag, address) for the caller, `X-Cellgate-Scope:
// node` (peer_headers), blocking: the array each one answered (`member` of
// its JSON object, or the whole answer when ""), by tag, and the tags of
// those that did not answer with one, comma-separated.
struct peer_answers {
    std::vector<std::pair<std::string, nlohmann::json>> parts;
    std::string unreachable;
};
peer_answers ask_peers(services& s, const http::request_ptr& req,
                       const std::vector<std::pair<std::string, std::string>>& peers, const std::string& target,
                       const std::string& member = "");

// Runs `work` on the file-I/O pool under the caller's tenant, off the io
// threads; it replies through `reply` as a handler does, and what it throws
// becomes the error reply. A tenant (or pool) with too much queued gets 429 (503).
void run_file_work(services& s, const http::request_ptr& req, http::reply_fn reply,
                   std::function<void(const http::reply_fn&)> work);

}  // namespace cellgate::kit
