#pragma once

// A tar archive a client sent, unpacked into a workspace (or one of its
// directories) through the contents store: directories and regular files
// only, every path checked as the files API checks it (no '..', no absolute
// paths, never through a link the kernel planted). A hard link becomes a
// copy of the file it names when the archive wrote that file earlier (no
// link is ever made; the copy counts against the workspace's cap); symbolic
// links, devices and FIFOs are skipped and reported, as are unsafe paths; a
// malformed or truncated archive stops the import with bad_path (400).

#include "contents/contents_store.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::contents {

struct import_result {
    std::uint64_t files = 0, directories = 0, bytes = 0;  // bytes of file data written
    struct skip {
        std::string path, why;
    };
    std::vector<skip> skipped;  // the first 100
    std::uint64_t skipped_count = 0;
};

// Reads the archive from `fd` (`size` bytes from offset `base` of a regular
// file, read with pread) into `root` ("" for the workspace; created if missing). Throws
// contents_error: bad_path for a malformed archive, too_large past
// `max_entries`, no_space when the workspace fills.
import_result import_tar(contents_store& store, std::string_view root, int fd, std::uint64_t size,
                         std::uint64_t max_entries, std::uint64_t base = 0);

}  // namespace cellgate::contents
