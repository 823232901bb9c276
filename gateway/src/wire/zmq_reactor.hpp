#pragma once

#include "cellgate/launcher/sandbox_info.hpp"
#include "cellgate/protocol/wire_codec.hpp"
#include "messaging/kernel_message.hpp"

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cellgate::wire {

// One thread owns every ZeroMQ socket of every kernel; other threads reach it
// only through a command queue and an eventfd wake-up. Per kernel there is one
// iopub SUB and one heartbeat DEALER; per client session ("channel set") one
// DEALER each for shell, control and stdin, so replies and input requests
// route back to the session that asked. Every frame a kernel sends is decoded
// with protocol::decode (sizes, signature, JSON, schema); bad messages are
// dropped and reported, never fatal, and one kernel's flood cannot hold the
// thread for long: each kernel gets a byte budget per turn across all its
// sockets, and heartbeats are served first and between data sockets, so a
// slow turn cannot make a healthy kernel look dead.
class zmq_reactor {
public:
    struct options {
        protocol::decode_limits limits;
        // libzmq's cap on open sockets (ZMQ_MAX_SOCKETS); 0 keeps its default
        // of 1,023. main() matches it to RLIMIT_NOFILE.
        int max_sockets = 0;
        // Relay every kernel socket through a zmtp_guard, which bounds each
        // message (frames, bytes) before libzmq holds it, and the bytes held
        // in libzmq for each socket. Off only for tests of the reactor alone.
        bool guard = true;
    };
    struct kernel_handlers {
        // Called on the reactor thread; must be quick (post elsewhere).
        // set_id is 0 for iopub, else the channel set that received it.
        std::function<void(std::uint64_t set_id, std::shared_ptr<messaging::kernel_message>)> on_message;
        std::function<void(const std::string& reason)> on_dropped;
        std::function<void()> on_heartbeat;
    };

    explicit zmq_reactor(options opts);
    zmq_reactor() : zmq_reactor(options{}) {}
    ~zmq_reactor();
    zmq_reactor(const zmq_reactor&) = delete;
    zmq_reactor& operator=(const zmq_reactor&) = delete;

    void start();
    void stop();

    // All calls below are thread-safe and asynchronous (queued to the reactor).
    // Connects a kernel's iopub and heartbeat; replaces an existing entry of
    // the same id, re-creating every socket (a restarted kernel has new keys)
    // while keeping its channel sets.
    void add_kernel(const std::string& kernel_id, const launcher::kernel_endpoints& endpoints,
                    kernel_handlers handlers);
    void remove_kernel(const std::string& kernel_id);
    // Closes a kernel's sockets but keeps its channel sets, for a restart:
    // the new sandbox reuses the same ipc paths with a new key, and sockets of
    // the old one would otherwise reconnect to it and see only bad signatures.
    // add_kernel() re-creates them.
    void suspend_kernel(const std::string& kernel_id);
    void open_channels(const std::string& kernel_id, std::uint64_t set_id);
    void close_channels(const std::string& kernel_id, std::uint64_t set_id);
    // Signs and sends; dropped if the kernel or set is gone.
    void send(const std::string& kernel_id, std::uint64_t set_id, messaging::channel chan,
              protocol::message msg);
    void ping(const std::string& kernel_id);

    struct stats {
        std::uint64_t received = 0, sent = 0, dropped = 0;
        std::uint64_t watched = 0;  // sockets in the epoll set now
    };
    stats counters() const;

private:
    struct impl;
    void post(std::function<void(impl&)> command);
    void run();

    std::unique_ptr<impl> impl_;
    std::thread thread_;
    std::mutex mutex_;
    std::deque<std::function<void(impl&)>> queue_;
    int wake_fd_ = -1;
    std::atomic<bool> running_{false};
};

}  // namespace cellgate::wire
