#pragma once

// Reads the headers of a tar archive a client sent (untrusted): ustar and
// old-style headers with their checksum checked, pax extended headers
// (path, linkpath, size) and GNU long names. Pure and bounded: it looks at the bytes
// given; the caller reads the data blocks. Used by the workspace import.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate::contents {

enum class tar_kind {
    file,       // '0' or NUL: regular data follows
    directory,  // '5'
    pax,        // 'x': the next header's overrides follow as data
    pax_global, // 'g': global overrides (ignored)
    gnu_long_name,  // 'L': the next header's name follows as data
    hard_link,  // '1': another name for an earlier entry (link_target)
    other,      // symlinks, devices, FIFOs, anything else: its data is skipped
};

struct tar_header_info {
    enum class status { entry, end, malformed } what = status::malformed;
    tar_kind kind = tar_kind::other;
    char typeflag = 0;
    std::string path;       // as the header says (prefix/name joined)
    std::string link_target;  // a link's: the header's linkname
    std::uint64_t size = 0; // bytes of data after the header
    std::string error;      // why malformed
};

// One 512-byte header block. An all-zero block is `end`.
tar_header_info parse_tar_header(std::string_view block);

// What a pax extended header (the data of an 'x' entry) sets for the next
// entry. Malformed records make the whole header malformed.
struct pax_overrides {
    std::optional<std::string> path, link_target;
    std::optional<std::uint64_t> size;
    bool malformed = false;
    std::string error;
};
pax_overrides parse_pax(std::string_view data);

// The data of a GNU long-name entry: the name up to its NUL.
std::string gnu_long_name(std::string_view data);

// Bounds the import holds to.
inline constexpr std::uint64_t max_tar_meta_bytes = 65536;  // a pax header's or long name's data
inline constexpr std::size_t max_tar_path_bytes = 4096;

}  // namespace cellgate::contents
