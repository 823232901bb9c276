#pragma once

#include "contents/contents_store.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace cellgate::agent {

// What /workspace held at one moment: path → (size, mtime). Walked through
// contents_store, so links are never followed; bounded in entries and depth.
struct workspace_snapshot {
    struct entry {
        std::uint64_t size = 0;
        std::int64_t mtime_ns = 0;
    };
    std::map<std::string, entry> files;
    bool complete = true;  // false when the bounds cut the walk short

    static workspace_snapshot take(const contents::contents_store& store, std::size_t max_entries = 10000,
                                   int max_depth = 32);
};

struct file_change {
    std::string path;
    std::uint64_t size = 0;
    std::string change;  // "created" or "modified"
};

// Files created or changed between two snapshots, in path order.
std::vector<file_change> diff(const workspace_snapshot& before, const workspace_snapshot& after);

// The contents of `changes`, in order, as long as their total stays within
// `limit_bytes` (nullopt for a file that did not fit, or could not be read).
std::vector<std::optional<std::string>> read_inline(const contents::contents_store& store,
                                                    const std::vector<file_change>& changes, std::size_t limit_bytes);

}  // namespace cellgate::agent
