#pragma once

// The egress proxy's TLS: a per-gateway certificate authority for the
// connections the proxy terminates (those it adds credentials to, or all of
// them when the operator says so), and the client side that originates TLS
// upstream with full verification.
//
// The CA's key stays in the gateway's state dir (0600) and in its memory;
// sandboxes get only its certificate (/run/egress/ca.pem), which the kernel
// image trusts beside the public roots. Leaf certificates are made on
// demand, one per host, signed by the CA, short-lived and cached (bounded).

#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cellgate::egress {

class certificate_authority {
public:
    // Loads ca.key and ca.pem from `dir`, or makes them there (the key 0600).
    // Throws std::runtime_error naming the step.
    static std::unique_ptr<certificate_authority> load_or_create(const std::filesystem::path& dir);
    ~certificate_authority();
    certificate_authority(const certificate_authority&) = delete;
    certificate_authority& operator=(const certificate_authority&) = delete;

    // The CA certificate, PEM: what a sandbox trusts.
    const std::string& certificate_pem() const noexcept { return ca_pem_; }

    // A server context presenting a certificate for `host` (a DNS name or an
    // IP address), signed by the CA. Cached per host.
    std::shared_ptr<boost::asio::ssl::context> server_context(const std::string& host);

    // The leaf certificate for `host` as PEM (what server_context presents).
    std::string leaf_pem(const std::string& host);

    static constexpr std::size_t max_cached_hosts = 512;
    static constexpr std::chrono::hours leaf_lifetime{24 * 7};

private:
    struct keys;
    explicit certificate_authority(std::unique_ptr<keys> k, std::string ca_pem);
    struct leaf {
        std::shared_ptr<boost::asio::ssl::context> ctx;
        std::string pem;
        std::chrono::system_clock::time_point made;
    };
    leaf leaf_for(const std::string& host);  // a copy: the cache may drop it meanwhile

    std::unique_ptr<keys> keys_;
    std::string ca_pem_;
    std::mutex mutex_;
    std::map<std::string, leaf> leaves_;
};

// The context for TLS towards upstream servers: peer verification against
// the system's roots plus `extra_ca_files` (an operator's private mirror).
// Each connection must still name and check its host (verify_upstream_host).
std::shared_ptr<boost::asio::ssl::context> make_upstream_context(const std::vector<std::string>& extra_ca_files);

// Sets SNI and the name the upstream certificate must carry on one
// connection's SSL handle (a DNS name, or an IP address).
bool verify_upstream_host(void* ssl_native_handle, const std::string& host);

}  // namespace cellgate::egress
