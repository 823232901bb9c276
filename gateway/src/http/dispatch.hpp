#pragma once

// Request handling as pure functions, apart from the socket: what the server
// does with a request whose headers are in (admit), and with one whose body
// is in too (dispatch). The connection code and the HTTP fuzzer call these
// same two functions.
//
// Order, so that nobody spends the gateway's memory before proving who they
// are: the request target is parsed and routed once; CORS preflights, bad
// paths, unknown routes and wrong methods are answered from the headers; a
// route that needs a token is refused (401/403) before any body byte is read;
// then the declared body size is checked against the limit for that kind of
// route; only then is "Expect: 100-continue" answered and the body read.

#include "http/auth_throttle.hpp"
#include "http/auth.hpp"
#include "http/hop.hpp"
#include "http/http_types.hpp"
#include "http/router.hpp"
#include "http/server_options.hpp"

#include <string>

namespace cellgate::http {

inline constexpr const char* channels_pattern = "/api/kernels/{kernel_id}/channels";

// Routes that need no token. Their requests carry no body, so they get only
// a small one.
bool public_route(const std::string& pattern);

struct admission {
    enum class action {
        respond,    // `reply` now; the body, if any, is never read
        read_body,  // read at most `body_limit` bytes into memory, then dispatch()
        upload,     // stream the body to `upload`'s file
        upgrade,    // a WebSocket on the kernel channels (Origin not yet checked)
        socket,     // a WebSocket on another endpoint: `socket` (Origin not yet checked)
        forward,    // another node made the id: relay the connection to `forward_to` (http/hop.hpp)
    };
    action what = action::respond;
    response reply;
    // For respond: a body follows the headers that was not read, so the
    // connection cannot carry another request.
    bool close_after = false;
    request_ptr ctx;  // req holds the headers (body empty), route, params, query, path, who
    const handler_fn* handler = nullptr;
    const upload_handler* upload = nullptr;
    const socket_handler* socket = nullptr;
    std::size_t body_limit = 0;
    std::string forward_to, forward_tag;  // for forward: the owner's host:port and tag
    // For forward: the caller as checked here, whom this node vouches for to
    // the owner in place of its credentials (http/peer_auth.hpp); none: the
    // owner's guard checks what the request carries (the E2B sandbox plane).
    std::optional<identity> forward_who;
};

struct dispatch_rules {
    const router& routes;
    const authenticator& auth;
    const server_options& options;
    const hop_rules* hops = nullptr;  // a cluster node's; null: every id is answered here
    auth_throttle* throttle = nullptr;  // failed authentication per client address; null: none
};

admission admit(const dispatch_rules& rules, const bhttp::request_header<>& header, const std::string& remote);

// Runs the admitted handler on a request whose body is in ctx->req. Replies
// exactly once, through `reply`; an exception becomes a JSON error (a client's
// mistake 4xx, anything else 500 with the detail only in the log).
void dispatch(const admission& a, reply_fn reply);

// The response for a body that was over `limit`.
response body_too_large(std::size_t limit);

}  // namespace cellgate::http
