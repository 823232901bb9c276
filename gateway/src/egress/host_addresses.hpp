#pragma once

// The addresses of this host's own interfaces (getifaddrs), kept current:
// collected at start and again whenever the kernel reports an address added
// or removed (a NETLINK_ROUTE socket subscribed to RTM_NEWADDR and
// RTM_DELADDR), and at least every 30 s should a message be lost. The proxy
// treats them as internal: a public address of the host (a cloud VM's, a
// dual-stack node's global IPv6) reaches the host's services, not the
// Internet.

#include "egress/policy.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cellgate::egress {

class host_addresses {
public:
    // Collects them now; `watch` starts the thread that follows changes.
    explicit host_addresses(bool watch = true);
    ~host_addresses();
    host_addresses(const host_addresses&) = delete;
    host_addresses& operator=(const host_addresses&) = delete;

    bool contains(const address& a) const;
    std::vector<address> list() const;
    std::uint64_t refreshes() const noexcept { return refreshes_.load(); }
    // Collects them again (also what the watcher does).
    void refresh();

    // The interfaces' addresses now (IPv4 and IPv6, link-local ones too).
    static std::vector<address> collect();

private:
    void watch();
    mutable std::mutex mutex_;
    std::vector<address> addresses_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> refreshes_{0};
    int stop_pipe_[2] = {-1, -1};
    std::thread watcher_;
};

}  // namespace cellgate::egress
