#pragma once

// The egress proxy: the only way out of a sandbox that has a network policy.
//
// Each such sandbox gets a unix socket of its own (<egress root>/<session>/
// proxy.sock, mounted read-only at /run/egress in the sandbox); inside, a
// forwarder turns 127.0.0.1:3128 into connections to it, and the kernel's
// HTTP(S)_PROXY point there. The socket a connection arrives on says which
// session made it, so nothing the sandbox sends can claim another's policy.
//
// Per connection: the request head (CONNECT host:port, or an absolute-form
// request, read strictly), the name judged by every policy layer before it
// is looked up, the target resolved (the operator's resolve map first, then
// the proxy's own bounded resolver, resolver_pool.hpp), every policy layer
// must allow (host, address, port), and the address must not be internal
// (loopback, private, link-local, the host's own, host_addresses.hpp, …)
// unless the operator mapped that name or allowed that network; the
// gateway's own port is never dialled. Then the proxy dials, and either tunnels (CONNECT, where a TLS
// ClientHello's SNI is checked against the policy as well) or forwards one
// plain request with Connection: close (so a second request on the same
// connection can never name another host). Every attempt, allowed or not,
// is recorded: time, host, port, address, bytes each way, verdict, rule.
//
// Bounds: connections per session and in all, new connections per session
// per second, name lookups in flight per session and tenant, a 16 KiB
// request head, 16 KiB buffers per direction, timeouts for the lookup, the
// head, the connect and idleness.

#include "egress/certificate_authority.hpp"
#include "egress/policy.hpp"
#include "egress/resolver_pool.hpp"

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cellgate::egress {

// --egress-resolve name=address[:port]: the proxy sends `name` there (port 0:
// the port asked for). The operator named it, so an internal address is fine.
struct resolve_entry {
    address addr;
    std::uint16_t port = 0;
};
// Parses "name=1.2.3.4:8443", "name=[::1]:443" or "name=1.2.3.4".
std::pair<std::string, resolve_entry> parse_resolve_entry(std::string_view text);

// A header the proxy adds to requests for one domain (credential injection):
// only inside TLS the proxy terminates unless `plain_http`, and only for the
// methods it names (none named: every method but TRACE, TRACK and CONNECT,
// which are never given one).
struct injected_header {
    rule domain;         // the host (or *. wildcard) it is for
    std::string header;  // e.g. "Authorization"
    std::string value;   // secret: never logged, never echoed
    bool plain_http = false;           // the operator allows it over plain HTTP too
    std::vector<std::string> methods;  // upper case; empty: the default set
    // An operator-wide secret's tenants (a tenant's own secrets are its own).
    std::vector<std::string> tenants;
    bool all_tenants = false;

    bool for_tenant(const std::string& tenant) const {
        return all_tenants || std::find(tenants.begin(), tenants.end(), tenant) != tenants.end();
    }
    // Whether a request of `method` over TLS (or not) to host:port gets it.
    bool applies(const std::string& host, std::uint16_t port, std::string_view method, bool over_tls) const {
        if (!over_tls && !plain_http) return false;
        if (!domain.matches(host, std::nullopt, port)) return false;
        if (methods.empty()) return method != "TRACE" && method != "TRACK" && method != "CONNECT";
        return std::find(methods.begin(), methods.end(), method) != methods.end();
    }
};

struct proxy_options {
    std::map<std::string, resolve_entry> resolve;
    std::vector<cidr> internal_allowed;         // the operator's exceptions to the internal-address rule
    std::vector<std::uint16_t> forbidden_ports;  // the gateway's own: never dialled on this machine
    std::size_t max_connections_per_session = 64;
    std::size_t max_connections = 4096;
    std::size_t max_log_per_session = 1000;
    // Connections a session may open per second (a burst of twice that);
    // past it, one is answered 429 at once and the session's socket is not
    // read again until it may have another (its sandbox waits in the backlog).
    double accept_rate = 50;
    // Name lookups (resolver_pool.hpp): threads, timeout, in flight per session and tenant.
    resolver_limits dns;
    // The host's own addresses are followed (host_addresses.hpp); off in unit tests.
    bool watch_host_addresses = true;
    std::chrono::milliseconds head_timeout{30000};
    std::chrono::milliseconds connect_timeout{10000};
    std::chrono::milliseconds idle_timeout{300000};
    // TLS the proxy terminates (certificate_authority.hpp): for the hosts it
    // adds credentials to, or for every CONNECT when intercept_all_tls.
    // Null authority: every tunnel stays end to end.
    std::shared_ptr<certificate_authority> tls_authority;
    std::shared_ptr<boost::asio::ssl::context> upstream_tls;
    bool intercept_all_tls = false;
    std::vector<std::string> upstream_ca_files;  // the operator's extra roots for upstream TLS
};

struct connection_record {
    std::uint64_t seq = 0;
    std::int64_t time_ms = 0;      // when the connection arrived (Unix ms)
    std::int64_t duration_ms = 0;
    std::string method;            // CONNECT, GET, …; "" when the head was unreadable
    std::string host;              // as asked for
    std::uint16_t port = 0;
    std::string address;           // what was (or would have been) dialled
    std::uint64_t bytes_up = 0, bytes_down = 0;
    bool allowed = false;
    std::string rule;              // the entry that decided
    std::string reason;            // why it was refused, or how it ended
    bool injected = false;         // a credential was added
    bool tls_terminated = false;   // the proxy ended the client's TLS and made its own upstream
};
nlohmann::json to_json(const connection_record& r);

// What one session may reach: its own policy under the kernelspec's and the
// tenant's maximum (every layer must allow), plus the headers to inject.
struct session_rules {
    std::string tenant;  // whose lookups it counts against (resolver_pool.hpp)
    std::vector<policy> layers;
    std::vector<injected_header> headers;
};

class proxy {
public:
    proxy(boost::asio::io_context& ioc, proxy_options options);
    ~proxy();
    proxy(const proxy&) = delete;
    proxy& operator=(const proxy&) = delete;

    // Listens on `socket` (created 0666 in its existing directory, replacing
    // a stale one) for this session. Throws std::system_error.
    void attach(const std::string& session, const std::filesystem::path& socket, session_rules rules);
    // For new connections; false when the session is not attached.
    bool set_rules(const std::string& session, session_rules rules);
    // Stops listening, removes the socket, ends the session's connections.
    void detach(const std::string& session);
    bool attached(const std::string& session) const;

    // The records an earlier gateway kept (ascending seq), before any new one.
    void restore_log(const std::string& session, std::vector<connection_record> earlier);
    std::vector<connection_record> log(const std::string& session, std::uint64_t after, std::size_t limit) const;
    // Called for every finished connection (on an io thread; keep it short).
    void on_record(std::function<void(const std::string& session, const connection_record&)> f);

    struct counters {
        std::atomic<std::uint64_t> allowed{0}, refused{0}, bytes_up{0}, bytes_down{0}, open{0};
        std::atomic<std::uint64_t> rate_limited{0};  // connections refused past accept_rate (not in the log)
    };
    const counters& stats() const noexcept;
    void render_metrics(std::string& out) const;

    // The CA certificate sandboxes trust (PEM), or "" without TLS interception.
    std::string ca_certificate_pem() const;

    // Adds a port never dialled, on any address (the gateway's own, once bound).
    void forbid_port(std::uint16_t port);

    // Stops every listener and connection (shutdown).
    void stop();

private:
    struct impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace cellgate::egress
