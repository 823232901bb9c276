#pragma once

#include "cellgate/launcher/sandbox_info.hpp"
#include "cellgate/protocol/hmac_signer.hpp"

#include <zmq.hpp>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>

namespace cellgate::fakes {

// A Jupyter kernel on ZeroMQ, for tests of the gateway's side of the wire. It
// binds the five sockets under `dir` (ipc://, as a sandbox's run dir holds
// them) with a key of its own and, on its own thread, does what ipykernel
// does for the requests the gateway sends by itself: kernel_info, execute
// and shutdown (which a client may send) are answered on the channel they
// came on, between iopub statuses busy and idle whose parent is the request;
// heartbeats are echoed.
// A muted kernel binds its sockets and answers nothing (a kernel that hangs
// while starting).
class fake_kernel {
public:
    explicit fake_kernel(const std::filesystem::path& dir, bool muted = false);
    ~fake_kernel();
    fake_kernel(const fake_kernel&) = delete;
    fake_kernel& operator=(const fake_kernel&) = delete;

    const launcher::kernel_endpoints& endpoints() const noexcept { return endpoints_; }
    // Heartbeats go unanswered from now on; everything else is answered (a
    // kernel whose process lives on but no longer responds).
    void stop_heartbeat() noexcept { heartbeat_stopped_ = true; }
    // Closes every socket: a dead kernel answers nothing. Idempotent.
    void stop();

private:
    void run();
    void answer(zmq::socket_t& socket);
    void echo();
    void publish_status(const char* execution_state, const std::string& parent_header);

    launcher::kernel_endpoints endpoints_;
    const protocol::hmac_signer signer_;
    const std::string session_;
    const bool muted_;
    int execution_count_ = 0;
    zmq::context_t ctx_{1};
    zmq::socket_t shell_, control_, stdin_, iopub_, hb_;
    std::atomic<bool> heartbeat_stopped_{false};
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace cellgate::fakes
