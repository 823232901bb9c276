#pragma once

// The core's front door for a session's files: one way to open its
// workspace, with one answer while the session is paused or between two
// sandboxes, for every surface.

#include "contents/contents_store.hpp"
#include "kernels/kernel.hpp"
#include "util/api_error.hpp"

#include <memory>

namespace cellgate::core {

// The session's workspace. api_exception(409) while it is paused (its files
// come back with it), `restarting_status` while its kernel is between two
// sandboxes, or the contents error's status.
std::unique_ptr<contents::contents_store> open_files(const kernels::kernel_ptr& k, unsigned restarting_status = 409);

// A workspace error's status: 400, 404, 409, 413, 507, 403 or 500.
unsigned contents_status(contents::error_kind k) noexcept;

// Runs a workspace operation; its contents_error leaves as the api_exception
// of that status, with its message.
template <class Fn>
auto guarded(Fn fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const contents::contents_error& e) {
        throw api_exception(contents_status(e.kind()), e.what());
    }
}

}  // namespace cellgate::core
