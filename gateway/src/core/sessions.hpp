#pragma once

// The core's front door for sessions. Every surface (the Jupyter REST API,
// /v1, E2B, MCP) parses its own wire into a session_request and starts the
// session here, and changes a live session's lifetime here too (its files:
// core/files.hpp). Nothing here knows a surface's URLs or JSON.

#include "agent/agent_service.hpp"
#include "core/network.hpp"
#include "core/session_request.hpp"
#include "kernels/kernel_manager.hpp"
#include "templates/template_store.hpp"

#include <chrono>
#include <vector>

namespace cellgate::core {

class sessions {
public:
    // `network` may be null: no session may then have a network.
    sessions(kernels::kernel_manager& kernels, const agent::agent_limits& limits, const network_settings* network);

    // The tenants' templates (null: none); set before the first start.
    void set_templates(templates::template_store* store) noexcept { templates_ = store; }

    // Starts a session; `done` gets its kernel, or the failure. A request the
    // core refuses throws api_exception before anything starts: 400 for a
    // bad network, volume or combination, 404 for a snapshot, volume,
    // kernelspec or template the tenant does not have.
    void start(const session_request& r, kernels::kernel_manager::done_kernel done);

    // The session now ends at `end_at` (at least a second after it was
    // created), idle or not: changed under the kernel's lock, which every
    // reader of its policy takes. The supervisor ends it at its next tick
    // past that.
    static void end_at(const kernels::kernel_ptr& k, std::chrono::system_clock::time_point end_at);

    kernels::kernel_manager& kernels() noexcept { return kernels_; }
    const agent::agent_limits& limits() const noexcept { return limits_; }

private:
    std::vector<kernels::volume_attachment> attachments(const session_request& r) const;

    kernels::kernel_manager& kernels_;
    const agent::agent_limits& limits_;
    const network_settings* network_;
    templates::template_store* templates_ = nullptr;
};

}  // namespace cellgate::core
