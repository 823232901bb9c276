#pragma once

#include "cellgate/launcher/launcher_config.hpp"

#include <map>
#include <string>

namespace cellgate::launcher {

// The launcher's rules for a sandbox's environment (names on the allow-list,
// at most 256 of them, values ≤ 4 KiB without NUL, 64 KiB in all). Throws
// spec_error naming the first problem. validate_spec applies it to every
// launch; the gateway applies it to env that reaches a kernel another way
// (a warm-pool claim sets it in the running kernel), so a session never holds
// env that its next restart would refuse (review L14).
void validate_env(const std::map<std::string, std::string>& env, const launcher_config& config);

}  // namespace cellgate::launcher
