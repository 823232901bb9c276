#pragma once

// The proxy's own name resolution, away from Asio's single resolver thread
// (which every async_resolve of an io_context shares, the cluster hop's
// too): `threads` workers doing getaddrinfo, each lookup held to `timeout`
// (its answer is abandoned past it; the thread it was on is replaced, up to
// `max_stuck` threads that wait on an abandoned lookup), and at most
// `per_session` and `per_tenant` lookups in flight (counted until
// getaddrinfo really returns, so a session whose names never answer holds
// only its own share). A lookup past a bound is refused at once.

#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include "egress/policy.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cellgate::egress {

struct resolver_limits {
    std::size_t threads = 8;
    std::chrono::milliseconds timeout{5000};
    std::size_t per_session = 4;
    std::size_t per_tenant = 6;
    std::size_t max_stuck = 64;
};

class resolver_pool {
public:
    struct answer {
        std::vector<address> addresses;
        std::string error;  // "" when addresses came back (possibly none)
        bool refused = false;  // past a bound (busy), not looked up
    };
    // getaddrinfo by default; tests give a stand-in.
    using lookup_fn = std::function<answer(const std::string& host)>;
    explicit resolver_pool(resolver_limits limits, lookup_fn lookup = {});
    ~resolver_pool();  // stop()
    resolver_pool(const resolver_pool&) = delete;
    resolver_pool& operator=(const resolver_pool&) = delete;

    // Looks `host` up (a name, never an address: the caller keeps those).
    boost::asio::awaitable<answer> resolve(std::string host, std::string session, std::string tenant);

    struct counters {
        std::atomic<std::uint64_t> lookups{0}, failed{0}, timed_out{0}, refused{0};
        std::atomic<std::uint64_t> in_flight{0}, threads{0}, stuck{0};
    };
    const counters& stats() const noexcept;
    const resolver_limits& limits() const noexcept { return limits_; }
    void render_metrics(std::string& out) const;

    // Wakes no one after it returns: waiting lookups end at their deadline.
    void stop();

private:
    struct job;
    struct state;
    resolver_limits limits_;
    std::shared_ptr<state> state_;  // shared with the workers, which may outlive the pool (a stuck getaddrinfo)
};

}  // namespace cellgate::egress
