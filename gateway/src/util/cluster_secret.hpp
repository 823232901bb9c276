#pragma once

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cellgate::util {

// The secret a cluster's nodes share (security review turn 3, H4): they sign
// their etcd records and every request they make of each other with it
// (HMAC-SHA256), so that a key written into etcd by anyone else names no
// peer, and a request that claims to come from a node is believed only with
// its signature. It is read once, from a file only its owner may read.
class cluster_secret {
public:
    static constexpr std::size_t min_bytes = 32;
    static constexpr std::size_t max_bytes = 4096;

    // Throws std::runtime_error naming the file and what is wrong: missing,
    // not a regular file, readable or writable by its group or others, or
    // fewer than 32 bytes (one trailing newline is not counted).
    static std::shared_ptr<const cluster_secret> from_file(const std::filesystem::path& file);
    explicit cluster_secret(std::string key);

    // HMAC-SHA256, lowercase hex, over `purpose` and each field, each
    // length-prefixed (no field can run into the next).
    std::string sign(std::string_view purpose, std::initializer_list<std::string_view> fields) const;
    // Whether `mac` is that signature (compared in constant time).
    bool verify(std::string_view mac, std::string_view purpose, std::initializer_list<std::string_view> fields) const;

private:
    std::string key_;
};

}  // namespace cellgate::util
