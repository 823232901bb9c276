#pragma once

// A workspace (or one of its directories) as a tar stream: every directory
// and regular file beneath it, read through the contents store (so never
// through a symlink the kernel planted), written to a file descriptor.
// Symlinks and special files are skipped and counted. Bounded in entries;
// the bytes are bounded by the workspace's own cap.

#include "contents/contents_store.hpp"

#include <cstdint>
#include <string_view>

namespace cellgate::contents {

struct export_result {
    std::uint64_t entries = 0;  // directories and files written
    std::uint64_t bytes = 0;    // of the archive
    std::uint64_t skipped = 0;  // symlinks, special files, files gone meanwhile
};

// Writes the tar of `root` (a directory, "" for the whole workspace; entries
// are named relative to it) to `fd`. Throws contents_error: not_found or
// bad_path for the root, too_large past `max_entries`, io on a write error.
export_result export_tar(const contents_store& store, std::string_view root, int fd, std::uint64_t max_entries);

}  // namespace cellgate::contents
