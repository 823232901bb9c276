#pragma once

#include "util/encoding.hpp"

#include "cellgate/protocol/json_check.hpp"

#include <boost/beast/http.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cellgate::http {

namespace bhttp = boost::beast::http;
using request = bhttp::request<bhttp::string_body>;

// Who is calling, as the token says.
struct identity {
    std::string tenant;
    std::string token_name;
    bool is_operator = false;
};

// A response as handlers build it; the server turns it into Beast messages.
// With file_fd >= 0 the body is streamed from that file (the server closes it).
// A streamed response body (Server-Sent Events): the handler writes chunks
// as they come, from any thread, and closes it at the end. The connection
// closes after the stream.
class stream_sink {
public:
    virtual ~stream_sink() = default;
    virtual void write(std::string chunk) = 0;
    virtual void close() = 0;
    // Called once if the client goes away before close().
    virtual void on_disconnect(std::function<void()> callback) = 0;
};

struct response {
    unsigned status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    int file_fd = -1;
    std::uint64_t file_size = 0;
    // When set, the headers go out with chunked encoding and this is called
    // with the sink for the body.
    std::function<void(std::shared_ptr<stream_sink>)> stream;
};

response json_response(unsigned status, const nlohmann::json& body);
// Every error on the wire: {"reason": <HTTP reason phrase>, "message": …}.
response error_response(unsigned status, const std::string& message);
response empty_response(unsigned status);

// One request on its way through a handler. Shared, so an async handler can
// keep it until it replies.
struct request_context {
    request req;
    std::string path;                                  // decoded path
    std::map<std::string, std::string> query;          // decoded; bare keys map to ""
    std::map<std::string, std::string> params;         // from the route pattern
    std::string route;                                 // the pattern, for metrics
    identity who;
    // `who` is a cluster peer's word (http/peer_auth.hpp), checked before any
    // guard: a guard that proves a tenant takes it as its own proof.
    bool vouched = false;
    std::string remote;
    // What the request holds until it is done (an upload's staging share).
    std::shared_ptr<const void> holds;

    const std::string& param(const std::string& name) const { return params.at(name); }
    std::optional<std::string> query_value(const std::string& name) const {
        const auto it = query.find(name);
        return it == query.end() ? std::nullopt : std::optional(it->second);
    }
    // Parses the body as JSON; throws api_exception(400) with a clear message.
    nlohmann::json json_body(bool allow_empty = true) const;
};

// Request bodies and stored notebooks deeper than this are refused before
// parsing (a notebook is a handful of levels deep).
inline constexpr std::size_t max_body_json_depth = 512;
using protocol::json_nesting_within;

using request_ptr = std::shared_ptr<request_context>;
// A handler replies exactly once, from any thread.
using reply_fn = std::function<void(response)>;
using handler_fn = std::function<void(const request_ptr&, reply_fn)>;

// A route whose request body streams straight into a file instead of
// memory. `prepare` runs once the headers are in (auth done): it returns the
// destination, or throws api_exception. `finish` runs after the body, with
// how it went, and replies.
struct upload_target {
    int fd = -1;                 // the server owns it from here
    std::uint64_t max_bytes = 0;
    std::function<void()> discard;  // removes the partial file after a failure
};
struct upload_handler {
    std::function<upload_target(const request_ptr&)> prepare;
    std::function<void(const request_ptr&, std::uint64_t bytes, reply_fn)> finish;
    // When set, only bodies of these media types (lower case, no
    // parameters) are streamed to the upload; the others go to the route's
    // plain handler, read into memory within the usual body limit.
    std::vector<std::string> content_types = {};
};

class authenticator;
// Proves who calls a guarded route (router::add_guarded) from its headers:
// sets ctx.who (and may add params) and returns nothing to let it through,
// or returns the refusal to send. Runs before the body is read.
using route_guard = std::function<std::optional<response>(request_context& ctx, const authenticator& auth)>;

// A WebSocket endpoint of text messages, beside the kernel channels (which
// have their own session): Jupyter's terminals. The handler runs once the
// upgrade's headers are admitted (token checked); it refuses with a response
// or returns `open`, which the connection calls after the handshake with its
// link. The link may be used from any thread; the peer is called on the
// connection's strand, `closed` exactly once.
class socket_link {
public:
    virtual ~socket_link() = default;
    // Queued; a client that falls too far behind is closed with 1013.
    virtual void send(std::string text) = 0;
    // After what is queued: with 1000, or with `code` (an application's own, 4000…4999).
    virtual void close(const std::string& reason) = 0;
    virtual void close_with_code(std::uint16_t code, const std::string& reason) = 0;
};
class socket_peer {
public:
    virtual ~socket_peer() = default;
    virtual void received(std::string text) = 0;
    virtual void closed() = 0;
};
struct socket_accept {
    std::optional<response> refusal;
    std::function<std::shared_ptr<socket_peer>(std::shared_ptr<socket_link>)> open;
};
using socket_handler = std::function<socket_accept(const request_ptr&)>;

// One Server-Sent Event: its name and its data as compact JSON (which holds
// no raw newline, so it cannot break the framing).
std::string sse_event(const std::string& event, const nlohmann::json& data);

// URL helpers, strict: bad escapes and NUL are errors (nullopt).
std::optional<std::string> url_decode(std::string_view in, bool plus_is_space = false);
std::map<std::string, std::string> parse_query(std::string_view query);
// url_encode_path lives in util/encoding.hpp (the agent's results use it too).

// Whether `list` (a comma-separated header such as Sec-WebSocket-Protocol)
// names `item`.
bool header_list_contains(std::string_view list, std::string_view item);

// Content-Disposition for a download of `filename`, whatever it holds (a
// kernel names its files): a plain-ASCII fallback in filename="…" and the
// exact name, %-escaped, in filename*=UTF-8''… (RFC 6266).
std::string attachment_disposition(std::string_view filename);

// Sets what every response carries, the handler's own headers, and CORS for
// an Origin named in `allow_origins`. A value holding CR, LF or NUL (built
// from a path, a file name or a header of the request) is dropped: written
// out, it would split the response. Returns how many were dropped.
std::size_t set_response_headers(bhttp::response_header<>& h, const response& r, const request* req,
                                 const std::vector<std::string>& allow_origins);
bool safe_header_value(std::string_view value) noexcept;

// A request header's value ("" when absent).
std::string header_value(const request& req, std::string_view name);

}  // namespace cellgate::http
