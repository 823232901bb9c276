#pragma once

#include "api/request_models.hpp"
#include "http/router.hpp"
#include "kernels/kernel_manager.hpp"
#include "kernels/session_registry.hpp"
#include "metrics/metrics.hpp"

#include <filesystem>
#include <string>

namespace cellgate::api {

// What the REST handlers work with. Handlers are thin: they parse and check
// the request, call the kernel manager or the contents store, and shape the
// Jupyter models; they never touch ZMQ or the launcher directly.
struct services {
    kernels::kernel_manager& kernels;
    kernels::session_registry& sessions;
    metrics::registry& metrics;
    std::filesystem::path checkpoint_root;  // gateway-side, outside every workspace
    std::string version;
    std::size_t max_read_bytes = 256u << 20;
};

void register_misc_api(http::router& r, services& s);       // /api, /api/status, /api/me, /healthz, /metrics
void register_kernels_api(http::router& r, services& s);    // kernelspecs, kernels
void register_sessions_api(http::router& r, services& s);   // /api/sessions
void register_contents_api(http::router& r, services& s);   // /api/contents, /files
}  // namespace cellgate::api
namespace cellgate::agent { class agent_service; }
namespace cellgate::api {
void register_agent_api(http::router& r, services& s, agent::agent_service& agents);  // /v1

// The chat page: compiled-in assets, or files from static_dir when it is set.
struct web_options {
    std::filesystem::path static_dir;  // holds web/ and js/ (clients/ of a checkout)
    bool output_scripts = false;       // let HTML outputs run scripts in their sandboxed frames
};
void register_static_api(http::router& r, const web_options& web);  // /, /static/…

// Shared by handlers: the calling tenant's kernel, or api_exception(404).
kernels::kernel_ptr kernel_or_404(services& s, const http::request_ptr& req, const std::string& id);

}  // namespace cellgate::api
