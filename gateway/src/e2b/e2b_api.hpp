#pragma once

// The E2B surface: the wire protocol of E2B's SDKs (`e2b`,
// `@e2b/code-interpreter`, and their Python twins) on the gateway's own
// port under /e2b, as an adapter over the sessions, executions and files the
// /v1 API uses. docs/e2b.md has the contract; ../shared/research/e2b-compat.md
// the study of the SDK it follows.
//
//   control plane   /e2b/sandboxes, /e2b/v2/sandboxes…     X-API-KEY: <cellgate token>
//   sandbox plane   /e2b/execute, /e2b/files, /e2b/<pkg.Service>/<Method>, …
//                   routed by E2b-Sandbox-Id / E2b-Sandbox-Port, proven by the
//                   sandbox's own access tokens (X-Access-Token, E2B-Traffic-Access-Token)

#include "kit/services.hpp"
#include "e2b/sandbox_book.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace cellgate::agent { class agent_service; }
namespace cellgate::processes { class process_table; }

namespace cellgate::e2b {

struct e2b_options {
    // What sandboxes report as their envd version. The SDKs gate features on
    // it (0.5.7: raw uploads; below 0.4.0 they force a user name); a plain
    // semver, since a suffix reads as a pre-release.
    std::string envd_version = "0.5.7";
    std::chrono::seconds default_timeout{300};  // as E2B's Python SDK sends
    // `--e2b-domain`: returned as the sandboxes' domain (the SDK then reaches
    // https://<port>-<id>.<domain> without E2B_SANDBOX_URL).
    std::string domain;
    std::size_t max_page = 100;  // sandboxes per list page
    std::size_t max_watches_per_tenant = 16;  // --max-watches-per-tenant (WatchDir, CreateWatcher)
    // Whether clients reach the gateway over TLS: the upload URLs it hands
    // out (a template's files) say https then.
    bool https = false;
};

// Adds the routes; the handlers refer to what the returned handle holds,
// which the caller keeps as long as the router.
[[nodiscard]] std::shared_ptr<void> register_e2b_api(http::router& r, kit::services& s, agent::agent_service& agents,
                                                     processes::process_table& processes, sandbox_book& book,
                                                     const e2b_options& options);

}  // namespace cellgate::e2b
