#pragma once

// What the E2B surface's handlers share: the services they adapt, the two
// guards (control plane, sandbox plane), error bodies in the SDK's shapes,
// and E2B's paths mapped onto the workspace.

#include "agent/agent_service.hpp"
#include "kit/services.hpp"
#include "contents/contents_store.hpp"
#include "e2b/code_contexts.hpp"
#include "e2b/dir_watch.hpp"
#include "e2b/e2b_api.hpp"
#include "e2b/sandbox_book.hpp"
#include "processes/process_table.hpp"
#include "util/every.hpp"

#include <string>
#include <string_view>

namespace cellgate::e2b {

// The two "ports" of a sandbox that the SDK addresses.
inline constexpr unsigned envd_port = 49983;
inline constexpr unsigned interpreter_port = 49999;
// Where E2B code expects its files: the workspace, seen from inside.
inline constexpr std::string_view home_dir = "/home/user";

struct surface {
    kit::services& services;
    agent::agent_service& agents;
    core::executions& cells;  // the default context's cells
    sandbox_book& book;
    processes::process_table* processes;
    e2b_options options;
    std::shared_ptr<code_contexts> contexts;
    std::shared_ptr<watch_book> watches;
};

// Control plane: X-API-KEY (or Authorization: Bearer) is a cellgate token,
// optionally with E2B's "e2b_" prefix; anything else is 401.
std::optional<http::response> control_guard(http::request_context& ctx, const http::authenticator& auth);
// Sandbox plane: the sandbox named by E2b-Sandbox-Id (or the Host, with a
// domain) and the token for `port` — on success the caller becomes the
// sandbox's tenant, and params "sandbox" and "port" are set. Port 0: either.
http::route_guard sandbox_guard(surface& e, unsigned port, bool connect_errors);

// Error bodies: REST {"code": <status>, "message"}; Connect RPC
// {"code": "not_found", "message"} with the Connect status.
http::response rest_error(unsigned status, const std::string& message);
http::response connect_error(std::string_view code, const std::string& message);
std::string_view connect_code_for(unsigned status) noexcept;
unsigned status_for_connect_code(std::string_view code) noexcept;

// A handler whose errors (thrown or replied in the gateway's own shape)
// reach the client in the SDK's: REST or Connect.
http::handler_fn rest_handler(http::handler_fn h);
http::handler_fn connect_handler(http::handler_fn h);

// "/home/user/a.txt", "a.txt" (relative to the home) and "/workspace/a.txt"
// → "a.txt"; anything else is not in a cellgate sandbox's view: throws
// api_exception(404). The result passed contents_store::check_path.
std::string workspace_path(std::string_view e2b_path);
std::string e2b_path(std::string_view workspace_relative);

// The sandbox's session (throws 404 when it has gone) and its workspace.
kernels::kernel_ptr sandbox_kernel(surface& e, const http::request_ptr& req);
std::unique_ptr<contents::contents_store> sandbox_store(const kernels::kernel_ptr& k);
// contents_error → api_exception with the matching status.
[[noreturn]] void rethrow_contents(const contents::contents_error& e);

void register_control_plane(http::router& r, surface& e);
// E2B's template wire: /v3/templates, builds, their status and logs (template_builds.cpp).
void register_template_builds(http::router& r, surface& e);
void register_code_interpreter(http::router& r, surface& e);
void register_envd(http::router& r, surface& e);
void register_process_service(http::router& r, surface& e);

}  // namespace cellgate::e2b
