#pragma once

// What the E2B adapter knows about each of its sandboxes beyond the session
// itself: the template it was asked for, its metadata and environment, the
// two per-sandbox access tokens, and when it ends. A sandbox is a cellgate
// session (its kernel id is the sandboxID); the book only adds E2B's view.
// Records are kept in memory and, with a state store, in the gateway's
// database, so a restarted gateway still answers the tokens it handed out.

#include "kernels/state_store.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::e2b {

using sys_clock = std::chrono::system_clock;

struct sandbox_record {
    std::string id;  // the session's kernel id
    std::string tenant;
    std::string template_id;
    std::string client_id;
    std::string envd_token, traffic_token;  // secrets: never logged
    std::map<std::string, std::string> metadata;
    std::map<std::string, std::string> env_vars;
    sys_clock::time_point started, end_at;
};

nlohmann::json to_json(const sandbox_record& r);  // the stored form, tokens included
sandbox_record record_from_json(const nlohmann::json& j);

class sandbox_book {
public:
    explicit sandbox_book(kernels::state_store* store = nullptr) : store_(store) {}

    void put(const sandbox_record& r);
    std::optional<sandbox_record> find(const std::string& id) const;
    // The caller's own sandbox, or nothing (another tenant's is not there).
    std::optional<sandbox_record> find(const std::string& tenant, const std::string& id) const;
    std::vector<sandbox_record> list(const std::string& tenant) const;
    void forget(const std::string& id);
    // Records of an earlier run (the caller keeps those whose session lives).
    std::vector<sandbox_record> load();

private:
    kernels::state_store* store_;
    mutable std::mutex mutex_;
    std::map<std::string, sandbox_record> records_;
};

// A fresh access token: 32 random bytes, hex.
std::string make_access_token();
// Constant-time comparison of a presented token with the expected one.
bool token_matches(std::string_view given, std::string_view expected) noexcept;

}  // namespace cellgate::e2b
