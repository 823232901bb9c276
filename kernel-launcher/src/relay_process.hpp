#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace cellgate::launcher {

// The host half of a relayed (gVisor) sandbox: one cellgate-relay process per
// sandbox, started before the container and holding the other ends of the
// pipes that become the container's stdin and stdout. It runs on its own,
// outside the launcher and the gateway, so a restarted gateway finds its
// sockets where they were; it ends when the sandbox does.
//
// Its files, all in the sandbox's run dir:
//   relay/k-1 … k-5   the host sockets, made once the kernel's exist inside
//   relay.lock        held (flock) for the relay's whole life: the liveness test
//   relay.pid         its pid, for teardown
//   relay.log         what it has to say (a few lines)
//   relay-script/     the sandbox side, mounted read-only at /mnt in the sandbox
struct relay_paths {
    std::filesystem::path socket_dir, lock, pid_file, log, script_dir;
};
relay_paths relay_paths_of(const std::filesystem::path& run_dir);

inline constexpr const char* sandbox_relay_mount = "/mnt";
inline constexpr const char* sandbox_relay_script = "/mnt/cellgate-relay.py";

// The sandbox side of the relay (sandbox/cellgate-relay.py, compiled in).
std::string_view sandbox_relay_source();

// The container's ends of the relay's pipes; closed on destruction (the
// runtime has its own copies by then).
struct relay_pipes {
    int sandbox_stdin = -1;
    int sandbox_stdout = -1;
    relay_pipes() = default;
    relay_pipes(const relay_pipes&) = delete;
    relay_pipes& operator=(const relay_pipes&) = delete;
    ~relay_pipes();
};

// Writes the sandbox side into the run dir and starts cellgate-relay (it
// daemonises and drops to host uid/gid `uid`/`gid`). Throws
// launch_error("start-relay"). `resumed`: for a sandbox restored from a
// checkpoint (the relay begins with reset; see relay_protocol.hpp).
void start_relay(const std::string& relay_binary, const std::filesystem::path& run_dir, std::uint32_t uid,
                 std::uint32_t gid, relay_pipes& pipes, bool resumed = false);

// True while the sandbox's relay runs.
bool relay_running(const std::filesystem::path& run_dir);

// Waits up to `grace` for the relay to end by itself (it does once its
// sandbox is gone), then kills it. A missing relay is fine.
void stop_relay(const std::filesystem::path& run_dir, std::chrono::milliseconds grace);

// cellgate-relay: `configured` if given, else next to the running program,
// else in PATH; "" when there is none.
std::string find_relay_binary(const std::string& configured);

}  // namespace cellgate::launcher
