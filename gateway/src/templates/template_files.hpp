#pragma once

// The files a template's COPY steps unpack: tar archives (gzip or not) a
// tenant uploads before its build (E2B's GET/PUT …/files/{hash}, /v1's
// PUT /v1/templates/files/{key}), each under a key the client chose (E2B's
// SDK sends a hash of the files it will copy). Each tenant has its own
// shelf: a tenant never learns whether another uploaded anything, and a
// build finds only its own tenant's archives. A step's layer is keyed by
// the archive's own SHA-256 (computed here), never by the client's key.
//
// Bounds: an archive is at most what the tenant's template storage has room
// for; a tenant keeps at most 256 archives, and past that (or past its
// bytes) the least recently used go first. Kept in
// <state dir>/template-files/<tenant hash>/ and found again after a restart.

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate::templates {

struct file_archive {
    std::filesystem::path path;
    std::string digest;  // SHA-256 of its bytes
    std::uint64_t bytes = 0;
};

class file_store {
public:
    static constexpr std::size_t max_archives_per_tenant = 256;

    explicit file_store(std::filesystem::path dir);

    // [A-Za-z0-9_-]{8,128}: E2B's hex hashes, /v1's keys.
    static bool valid_key(const std::string& key);

    std::optional<file_archive> find(const std::string& tenant, const std::string& key);
    // An unnamed file on the store's disk for an upload of `tenant`'s (the
    // caller writes it and owns the descriptor); api_exception(500) when none.
    int begin(const std::string& tenant);
    // Keeps what `fd` holds as `tenant`'s archive `key` (replacing one of
    // that key), after making room: at most `max_bytes` held by the
    // tenant's archives with it. api_exception(413) when it alone is larger.
    file_archive commit(const std::string& tenant, const std::string& key, int fd, std::uint64_t max_bytes);
    // commit() of bytes the caller holds in memory.
    file_archive put(const std::string& tenant, const std::string& key, std::string_view bytes, std::uint64_t max_bytes);
    // What a tenant's archives hold.
    std::uint64_t bytes(const std::string& tenant);

private:
    struct entry {
        file_archive archive;
        std::int64_t used_ms = 0;
    };
    std::filesystem::path tenant_dir(const std::string& tenant) const;
    std::map<std::string, entry>& shelf_locked(const std::string& tenant);

    std::filesystem::path dir_;
    std::mutex mutex_;
    std::map<std::string, std::map<std::string, entry>> shelves_;  // tenant → key → archive (loaded on first use)
};

}  // namespace cellgate::templates
