#pragma once

#include <exception>
#include <string>

namespace cellgate::kernels {

// Why a kernel operation did not happen, in the core's own terms. The core
// never picks an HTTP status: each surface maps the kind to its own answer
// (kit/services.hpp: failure_response), so a new surface reuses the words, not
// the Jupyter REST API's numbers. `message` is safe to show a client.
enum class failure_kind {
    no_such_spec,   // the kernelspec is not configured
    no_such_kernel, // not found, or gone (shut down) while the call waited
    invalid,        // the request itself is wrong (env, policy)
    over_quota,     // the tenant's or the gateway's kernel limit is reached
    unavailable,    // the gateway is shutting down
    not_running,    // the kernel is dead or not yet started
    busy,           // a restart or shutdown is already under way
    start_failed,   // the sandbox could not be started or restarted
};

struct failure {
    failure_kind kind;
    std::string message;
};

// What a client is told when its sandbox did not start: no more than that,
// unless its template's ready check never passed, when the check and the
// start command's log tail (the sandbox's own output, in `launcher_error`)
// follow.
std::string start_failure_message(const std::exception& launcher_error);

}  // namespace cellgate::kernels
