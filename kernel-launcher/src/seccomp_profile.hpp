#pragma once

#include <nlohmann/json.hpp>

namespace cellgate::launcher {

// The OCI `linux.seccomp` object every sandbox gets: allow by default, deny
// (EPERM) the system calls a Python kernel never needs and that widen the
// attack surface on the host kernel, and refuse namespace creation in clone.
nlohmann::json default_seccomp_profile();

// The same for gVisor (runsc --oci-seccomp), less the clone3 rule: runsc of
// 2022 ignores errnoRet and answers every denied call with EPERM, and glibc
// falls back from clone3 to clone only on ENOSYS (posix_spawn, system() and
// subprocess would all fail). gVisor does not implement clone3 and answers
// ENOSYS itself, which is what the rule is for.
nlohmann::json gvisor_seccomp_profile();

}  // namespace cellgate::launcher
