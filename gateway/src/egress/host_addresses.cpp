#include "egress/host_addresses.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace cellgate::egress {

std::vector<address> host_addresses::collect() {
    std::vector<address> out;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return out;
    for (auto* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr) continue;
        address a;
        if (i->ifa_addr->sa_family == AF_INET) {
            const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
            a.v4 = true;
            a.bytes[10] = a.bytes[11] = 0xff;
            std::copy_n(reinterpret_cast<const std::uint8_t*>(&in->sin_addr.s_addr), 4, a.bytes.begin() + 12);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
            std::copy_n(in6->sin6_addr.s6_addr, 16, a.bytes.begin());
            // A mapped form is the IPv4 address (as address::parse makes it).
            if (const auto p = address::parse(a.to_string())) a = *p;
        } else {
            continue;
        }
        if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
    ::freeifaddrs(list);
    return out;
}

host_addresses::host_addresses(bool watch_changes) {
    refresh();
    if (!watch_changes) return;
    if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) return;
    watcher_ = std::thread([this] { watch(); });
}

host_addresses::~host_addresses() {
    stop_ = true;
    if (stop_pipe_[1] >= 0) {
        const char x = 1;
        [[maybe_unused]] const auto n = ::write(stop_pipe_[1], &x, 1);
    }
    if (watcher_.joinable()) watcher_.join();
    for (const int fd : stop_pipe_)
        if (fd >= 0) ::close(fd);
}

void host_addresses::refresh() {
    auto now = collect();
    std::lock_guard lock(mutex_);
    addresses_ = std::move(now);
    ++refreshes_;
}

bool host_addresses::contains(const address& a) const {
    std::lock_guard lock(mutex_);
    return std::find(addresses_.begin(), addresses_.end(), a) != addresses_.end();
}

std::vector<address> host_addresses::list() const {
    std::lock_guard lock(mutex_);
    return addresses_;
}

void host_addresses::watch() {
    // Without netlink (refused by a seccomp filter, say): every 30 s only.
    int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (fd >= 0) {
        sockaddr_nl sa{};
        sa.nl_family = AF_NETLINK;
        sa.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
            ::close(fd);
            fd = -1;
        }
    }
    auto last = std::chrono::steady_clock::now();
    char buf[8192];
    while (!stop_) {
        pollfd fds[2] = {{stop_pipe_[0], POLLIN, 0}, {fd, POLLIN, 0}};
        const int n = ::poll(fds, fd >= 0 ? 2 : 1, 30000);
        if (stop_) break;
        bool changed = std::chrono::steady_clock::now() - last >= std::chrono::seconds(30);
        if (n > 0 && fd >= 0 && (fds[1].revents & (POLLIN | POLLERR))) {
            // Drain every message (an overflow, ENOBUFS, counts as a change too).
            for (;;) {
                const auto got = ::recv(fd, buf, sizeof buf, 0);
                if (got < 0 && errno == EAGAIN) break;
                changed = true;
                if (got <= 0 && errno != ENOBUFS) break;
            }
        }
        if (changed) {
            refresh();
            last = std::chrono::steady_clock::now();
        }
    }
    if (fd >= 0) ::close(fd);
}

}  // namespace cellgate::egress
