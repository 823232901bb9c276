#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace boost::asio::ssl {
class context;
}

namespace cellgate::util {

// One HTTP/1.1 request, blocking, with a deadline over the whole of it
// (name lookup, connect, TLS handshake, write, read): for a cluster node's
// calls to etcd and to its peers, made on threads that may wait, never on an
// io thread.
struct http_reply {
    unsigned status = 0;
    std::string body;
};
struct http_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws http_failure when no reply came (the message names host:port and
// why). With `tls`, over TLS with that context: the server's certificate
// must chain to its CA and name `host` (a DNS name or an IP address).
http_reply http_call(const std::string& method, const std::string& host, const std::string& port,
                     const std::string& target, const std::vector<std::pair<std::string, std::string>>& headers,
                     const std::string& body, std::chrono::milliseconds timeout,
                     const boost::asio::ssl::context* tls = nullptr);

// A TLS client context that trusts only the CA in `ca_file` (PEM) and, when
// `cert_file` is not empty, presents that certificate with `key_file`'s key.
// TLS 1.2 at least. Throws std::runtime_error naming the file that failed.
std::shared_ptr<boost::asio::ssl::context> make_tls_client(const std::filesystem::path& ca_file,
                                                           const std::filesystem::path& cert_file,
                                                           const std::filesystem::path& key_file);

}  // namespace cellgate::util
