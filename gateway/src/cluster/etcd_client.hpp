#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace boost::asio::ssl {
class context;
}

namespace cellgate::cluster {

// What etcd could not do: no member answered, or one answered with an error.
struct etcd_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A small client for etcd v3's JSON gateway (etcd 3.4: POST /v3/kv/range,
// /v3/kv/put, /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive,
// /v3/lease/revoke; keys and values travel base64-encoded). Debian has no C++
// etcd client; this is HTTP/1.1 over Beast, over TLS with a client
// certificate for https:// endpoints (review turn 3, H4). Each call tries the
// endpoints in turn, starting from the last that answered, each with the
// timeout; blocking: call it from a thread of its own, never an io thread.
class etcd_client {
public:
    struct key_value {
        std::string key, value;
        std::int64_t lease = 0;
        std::int64_t mod_revision = 0;
    };
    struct put_op {
        std::string key, value;
        std::int64_t lease = 0;
    };

    // `endpoints`: "https://host:port" each, with `tls` (util::make_tls_client:
    // the CA, this node's certificate and key), or "http://host:port" each
    // without (checked: throws std::invalid_argument; no mixing).
    explicit etcd_client(std::vector<std::string> endpoints,
                         std::shared_ptr<const boost::asio::ssl::context> tls = nullptr,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(1500));

    std::int64_t grant(std::chrono::seconds ttl);
    // The lease's remaining TTL after the refresh; 0 when it has expired.
    std::int64_t keepalive(std::int64_t lease);
    void revoke(std::int64_t lease);
    void put(const std::string& key, const std::string& value, std::int64_t lease = 0);
    std::vector<key_value> range_prefix(const std::string& prefix);
    std::optional<key_value> get(const std::string& key);
    void erase(const std::string& key);
    // How many keys start with `prefix` (only the count travels).
    std::size_t count_prefix(const std::string& prefix);
    // The puts, all or none, only if `key` was last modified at `mod_revision`
    // (0: only if it does not exist). False: it had changed.
    bool put_if_unchanged(const std::string& key, std::int64_t mod_revision, const std::vector<put_op>& puts);

    static std::vector<std::string> parse_endpoints(const std::string& comma_separated);
    struct endpoint {
        std::string host, port;
    };
    // Each "http(s)://host:port" (https:// when `tls`) as host and port;
    // throws std::invalid_argument naming the first that is not one.
    static std::vector<endpoint> split_endpoints(const std::vector<std::string>& endpoints, bool tls);

private:
    nlohmann::json call(const std::string& path, const nlohmann::json& body);
    std::vector<endpoint> endpoints_;
    std::shared_ptr<const boost::asio::ssl::context> tls_;
    std::chrono::milliseconds timeout_;
    std::size_t preferred_ = 0;
};

}  // namespace cellgate::cluster
