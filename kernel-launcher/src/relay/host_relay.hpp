#pragma once

#include "relay/relay_mux.hpp"

#include <filesystem>
#include <functional>
#include <string>

namespace cellgate::launcher::relay {

struct host_relay_options {
    std::filesystem::path socket_dir;  // k-1 … k-5 are made here once the sandbox is ready
    int from_sandbox = -1;             // read end of the sandbox's stdout
    int to_sandbox = -1;               // write end of the sandbox's stdin
    mux_limits limits;
    bool resumed = false;              // the sandbox was restored: see relay_mux
    std::function<void(const std::string&)> log;  // a few lines per sandbox, never per message
};

struct host_relay_result {
    bool protocol_error = false;  // the sandbox side broke the protocol
    std::string reason;           // why the relay ended
};

// One epoll loop, one thread: listens on the five host sockets (after the
// sandbox says ready) and moves each accepted connection's bytes through
// relay_mux. Returns when the sandbox side closes its output or breaks the
// protocol; removes its sockets and closes every client before returning.
host_relay_result run_host_relay(const host_relay_options& options);

}  // namespace cellgate::launcher::relay
