#pragma once

#include "cellgate/launcher/sandbox_info.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

namespace cellgate::launcher {

using clock_type = std::chrono::steady_clock;

// Returns a reason when the sandbox's init is gone, "" while it runs.
using liveness_check = std::function<std::string()>;

// Waits until the kernel has bound all five sockets in `kernel_dir`. Throws
// launch_error("wait-for-sockets") on timeout or when the kernel exits.
void wait_for_sockets(const std::filesystem::path& kernel_dir, clock_type::time_point deadline,
                      const liveness_check& alive);

// Checks that every socket path is a socket and not a link the kernel planted.
void verify_sockets(const std::filesystem::path& kernel_dir);

// Sends kernel_info_request on shell (again every second) until a correctly
// signed reply arrives. Returns the reply's content. Throws
// launch_error("kernel-info") on timeout, exit or a bad reply.
nlohmann::json request_kernel_info(const kernel_endpoints& endpoints,
                                   clock_type::time_point deadline, const liveness_check& alive);

// The socket file names the connection file gives the kernel (ip "…/k").
inline constexpr const char* socket_names[] = {"k-1", "k-2", "k-3", "k-4", "k-5"};

}  // namespace cellgate::launcher
