#pragma once

#include "http/http_types.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::http {

// Maps (method, path) to a handler. Patterns are '/'-separated: a literal
// segment, "{name}" for one segment, or a trailing "{name*}" for the rest of
// the path (possibly empty). Matching is a pure function of its inputs.
class router {
public:
    void add(bhttp::verb method, std::string pattern, handler_fn handler);
    void add_upload(bhttp::verb method, std::string pattern, upload_handler handler);
    // A route that proves its caller itself (a surface with its own
    // credentials, such as the E2B adapter's X-API-KEY and access tokens):
    // `guard` runs in place of the token check, before any body byte is read.
    void add_guarded(bhttp::verb method, std::string pattern, route_guard guard, handler_fn handler);
    // A WebSocket endpoint (GET with an upgrade); a plain GET there is a 400.
    // With a guard, the guard proves the caller in place of the token check.
    void add_socket(std::string pattern, socket_handler handler, std::optional<route_guard> guard = std::nullopt);

    struct match {
        const handler_fn* handler = nullptr;
        const upload_handler* upload = nullptr;
        const route_guard* guard = nullptr;
        const socket_handler* socket = nullptr;
        std::map<std::string, std::string> params;
        std::string pattern;
        unsigned status = 200;  // 404 (no such path) or 405 (wrong method) when handler is null
        std::string allow;      // for 405: the methods the path accepts
    };
    // `raw_path` is the request target without its query, still URL-encoded;
    // each segment is decoded after splitting (so %2F stays inside a segment).
    // A bad escape gives status 400.
    match find(bhttp::verb method, std::string_view raw_path) const;

private:
    struct route {
        bhttp::verb method;
        std::string pattern;
        std::vector<std::string> segments;
        handler_fn handler;
        std::optional<upload_handler> upload;
        std::optional<route_guard> guard;
        std::optional<socket_handler> socket;
    };
    std::vector<route> routes_;
};

}  // namespace cellgate::http
