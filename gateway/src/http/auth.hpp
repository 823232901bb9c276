#pragma once

#include "http/http_types.hpp"

#include <optional>
#include <string>
#include <vector>

namespace cellgate::http {

struct token_entry {
    std::string token;
    std::string tenant = "default";
    std::string name = "default";
    std::size_t max_sessions = 0;  // 0: the server's per-tenant default
    // May read what spans tenants (/metrics). The --token / CELLGATE_TOKEN
    // (or generated) token is the operator's; a tokens entry is one only with
    // "operator": true (review L4).
    bool is_operator = false;
};

// Token authentication: `Authorization: token <t>`, `Authorization: Bearer <t>`
// or `?token=<t>` (browsers cannot set headers on a WebSocket). Tokens are
// compared by their SHA-256 digests in constant time, so neither the content
// nor the length of a configured token leaks through timing.
class authenticator {
public:
    explicit authenticator(std::vector<token_entry> tokens);

    enum class outcome { ok, missing, wrong };
    struct result {
        outcome status = outcome::missing;
        identity who;
    };
    result check(const request& req, const std::map<std::string, std::string>& query) const;
    // One token, however it came (a surface's own header).
    result check_token(std::string_view token) const;
    // The identity of the entry for `tenant` and `token_name`, if any: a
    // cluster peer vouches for a caller by these (http/peer_auth.hpp).
    std::optional<identity> known(const std::string& tenant, const std::string& token_name) const;

private:
    struct entry {
        std::string digest;  // SHA-256 of the token
        identity who;
    };
    std::vector<entry> entries_;
};

// Origin policy for browsers: an Origin header must be in `allowed` (exact
// "scheme://host[:port]" or "*"), or match the request's own Host. No Origin
// header (curl, SDKs, Node) is allowed.
bool origin_allowed(const request& req, const std::vector<std::string>& allowed);

// 32 random bytes, hex: the token printed when none is configured.
std::string make_token();

}  // namespace cellgate::http
