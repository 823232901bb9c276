#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cellgate::util {

// One plain HTTP/1.1 request, blocking, with a deadline over the whole of it
// (name lookup, connect, write, read): for a cluster node's calls to etcd and
// to its peers, made on threads that may wait, never on an io thread.
struct http_reply {
    unsigned status = 0;
    std::string body;
};
struct http_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws http_failure when no reply came (the message names host:port and why).
http_reply http_call(const std::string& method, const std::string& host, const std::string& port,
                     const std::string& target, const std::vector<std::pair<std::string, std::string>>& headers,
                     const std::string& body, std::chrono::milliseconds timeout);

}  // namespace cellgate::util
