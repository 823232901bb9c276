#pragma once

#include <nlohmann/json.hpp>

namespace cellgate::launcher {

// The OCI `linux.seccomp` object every sandbox gets: allow by default, deny
// (EPERM) the system calls a Python kernel never needs and that widen the
// attack surface on the host kernel, and refuse namespace creation in clone.
nlohmann::json default_seccomp_profile();

}  // namespace cellgate::launcher
