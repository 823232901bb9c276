#pragma once

// The headers of a POSIX tar stream (ustar, with a pax extended header where
// a name or a size does not fit ustar's fields), for exporting a workspace.
// Pure: it formats bytes; the caller writes them and the file data, padded
// to 512 bytes (tar_padding), and ends the stream with tar_end().

#include <cstdint>
#include <string>
#include <string_view>

namespace cellgate::contents {

struct tar_entry {
    std::string path;           // relative, '/'-separated, no trailing '/'
    bool directory = false;
    std::uint64_t size = 0;     // of a regular file's data
    std::int64_t mtime_s = 0;   // seconds since the epoch
    std::uint32_t mode = 0644;  // permission bits only
    // A hard link (type '1', no data) to this earlier entry's path, when set.
    std::string link_target;
};

inline constexpr std::size_t tar_block = 512;

// One entry's header block(s): a pax 'x' header first when the path is over
// 100 bytes or does not split into ustar's prefix and name, a link's target
// is over 100 bytes, or the size is 8 GiB or more; then the ustar header.
std::string tar_header(const tar_entry& e);

// Zero bytes that bring `data_size` up to a whole block.
std::string tar_padding(std::uint64_t data_size);

// The end of the archive: two zero blocks.
std::string tar_end();

}  // namespace cellgate::contents
