#pragma once

// What every connection of the HTTP surface shares: its options, the token
// check, the routes, the connection caps, the metrics, the live WebSockets
// (so shutdown can close them) and who takes an upgrade on the kernel
// channels over. The transport knows no kernel: that is the surface's.

#include "http/auth.hpp"
#include "http/auth_throttle.hpp"
#include "http/connection_limiter.hpp"
#include "http/hop.hpp"
#include "http/router.hpp"
#include "http/server_options.hpp"
#include "metrics/metrics.hpp"

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace cellgate::http {

// Something that can be closed on shutdown (a live WebSocket).
class closable {
public:
    virtual ~closable() = default;
    virtual void shutdown(const std::string& reason) = 0;
};

struct channel_upgrade;  // handoffs.hpp

struct server_context {
    server_context(server_options o, authenticator a, metrics::registry& m)
        : options(std::move(o)),
          auth(std::move(a)),
          metrics(m),
          connections(options.max_connections, options.max_connections_per_address),
          tenant_sockets(options.max_connections, options.max_websockets_per_tenant),
          auth_failures(auth_throttle::options{.burst = static_cast<double>(options.max_auth_failures)}) {}

    server_options options;
    authenticator auth;
    router routes;
    const channel_upgrade* channels = nullptr;  // null: the kernel channels answer 404
    metrics::registry& metrics;
    connection_limiter connections;
    connection_limiter tenant_sockets;  // WebSockets per tenant (keyed by tenant, not address)
    auth_throttle auth_failures;        // failed authentication per client address
    hop_rules hops;  // a cluster node's (its tag, who holds a tag); empty otherwise

    void track(const std::shared_ptr<closable>& c);
    void untrack(const std::shared_ptr<closable>& c);
    std::vector<std::shared_ptr<closable>> live_sockets();

private:
    std::mutex live_mutex_;
    std::set<std::weak_ptr<closable>, std::owner_less<std::weak_ptr<closable>>> live_;
};

}  // namespace cellgate::http
