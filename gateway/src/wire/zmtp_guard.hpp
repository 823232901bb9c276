#pragma once

#include "wire/zmtp_reader.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cellgate::wire {

// Stands between libzmq and each kernel's unix socket, so that libzmq never
// parses hostile ZMTP without a per-message limit (it has none: a message
// of any number of frames is held whole before the reader sees frame one).
// For each kernel socket the guard listens on a socket of its own, in a
// private 0700 directory, and libzmq connects there instead. Every
// connection is relayed to the kernel's path, byte for byte, through
// buffers of a fixed size, while a zmtp_reader follows what the kernel
// sends: past a limit, the connection is closed before the frame's body is
// relayed (libzmq drops the partial message and reconnects).
//
// Memory is also bounded across messages: each route may have at most a
// window of message bytes relayed to libzmq and not yet taken by the
// reactor (which reports them through route::consumed). Past that the guard
// stops reading from the kernel, so a flood waits in the kernel's own
// queues (its cgroup), not in the gateway. The window is larger than one
// message, so a message always completes.
//
// One thread with one epoll set serves every connection.
class zmtp_guard {
public:
    struct route;  // one kernel socket: its listener, its connections, its window

    // The reactor's handle on a route; closing it closes the route.
    class lease {
    public:
        ~lease();
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        const std::string& endpoint() const noexcept;  // "ipc://…" for libzmq
        // Message bytes the reactor has taken from libzmq; opens the window.
        void consumed(std::size_t bytes) noexcept;

    private:
        friend class zmtp_guard;
        lease(zmtp_guard& g, std::shared_ptr<route> r) : guard_(g), route_(std::move(r)) {}
        zmtp_guard& guard_;
        std::shared_ptr<route> route_;
    };

    // Called on the guard's thread when a connection is closed for a limit,
    // with the label given to open().
    using refused_handler = std::function<void(const std::string& label, std::string_view why)>;

    explicit zmtp_guard(refused_handler on_refused = {},
                        std::filesystem::path parent = std::filesystem::temp_directory_path());
    ~zmtp_guard();
    zmtp_guard(const zmtp_guard&) = delete;
    zmtp_guard& operator=(const zmtp_guard&) = delete;

    // Listens for libzmq on a new path that relays to kernel_endpoint
    // ("ipc://…"), under these limits. Throws when it cannot listen.
    std::unique_ptr<lease> open(const std::string& kernel_endpoint, const zmtp_reader::limits& limits,
                                std::size_t window_bytes, std::string label = {});

    std::uint64_t closed_connections() const noexcept { return refused_.load(); }  // for a limit

    struct impl;

private:
    void post_close(std::shared_ptr<route> r);
    void wake() noexcept;
    void run();

    refused_handler on_refused_;
    std::filesystem::path dir_;
    int epoll_fd_ = -1;
    int wake_fd_ = -1;
    std::atomic<std::uint64_t> next_id_{0};
    std::atomic<std::uint64_t> refused_{0};
    std::atomic<bool> running_{true};
    std::mutex mutex_;
    std::vector<std::shared_ptr<route>> opened_, closed_;  // handed to the thread
    std::unique_ptr<impl> impl_;
    std::thread thread_;
};

}  // namespace cellgate::wire
