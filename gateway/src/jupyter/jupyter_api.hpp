#pragma once

// The Jupyter Server REST API that JupyterLab, @jupyterlab/services and the
// Kernel Gateway clients speak: /api, kernelspecs, kernels, sessions,
// contents and /files, terminals, and the kernel channels' WebSocket
// (docs/jupyter.md).

#include "kit/services.hpp"

namespace cellgate::processes { class process_table; }
namespace cellgate::http { struct channel_upgrade; }

namespace cellgate::jupyter {

using kit::services;

// /api/kernels/{id}/channels: the hooks the transport hands the upgrade to
// (kernel_channels.hpp); they find the kernel in `kernels`.
http::channel_upgrade kernel_channels(kernels::kernel_manager& kernels);

void register_misc_api(http::router& r, services& s);       // /api, /api/status, /api/me, /healthz, /metrics
void register_kernels_api(http::router& r, services& s);    // kernelspecs, kernels
void register_sessions_api(http::router& r, services& s);   // /api/sessions
void register_contents_api(http::router& r, services& s);   // /api/contents, /files
// /api/terminals and /terminals/websocket/{name}; the caller keeps what it
// returns as long as the router.
[[nodiscard]] std::shared_ptr<void> register_terminals_api(http::router& r, services& s, processes::process_table& table);

}  // namespace cellgate::jupyter
