#pragma once

// A workspace (or one of its directories) as a tar stream: every directory
// and regular file beneath it, read through the contents store (so never
// through a symlink the kernel planted), written to a file descriptor.
// Symlinks and special files are skipped and counted. A file with more than
// one name is written once; its other names are hard-link entries. Bounded
// in entries and in file data: at most `max_data_bytes` (the workspace's
// cap, what a workspace could hold densely), counted by each file's size, so
// a sparse file counts at its full length and one whose holes would take
// the archive past the bound refuses the export before any of its bytes.

#include "contents/contents_store.hpp"

#include <cstdint>
#include <string_view>

namespace cellgate::contents {

struct export_result {
    std::uint64_t entries = 0;  // directories and files written
    std::uint64_t bytes = 0;    // of the archive
    std::uint64_t skipped = 0;  // symlinks, special files, files gone meanwhile
    std::uint64_t links = 0;    // hard-link entries (among `entries`)
    std::uint64_t data_bytes = 0;  // file data written (within max_data_bytes)
};

// Writes the tar of `root` (a directory, "" for the whole workspace; entries
// are named relative to it) to `fd`. Throws contents_error: not_found or
// bad_path for the root, too_large past `max_entries` or `max_data_bytes`,
// io on a write error.
export_result export_tar(const contents_store& store, std::string_view root, int fd, std::uint64_t max_entries,
                         std::uint64_t max_data_bytes);

}  // namespace cellgate::contents
