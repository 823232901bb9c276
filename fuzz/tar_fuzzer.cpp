// libFuzzer target: the workspace import's tar reader (contents/tar_reader):
// a header block and a pax extended header, both from a client. Beyond "no
// crash": an entry's path has no NUL, a pax path stays within its bound, a
// malformed answer says why, and the same bytes give the same answer.

#include "contents/tar_reader.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace cellgate::contents;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    if (size >= 512) {
        const auto h = parse_tar_header(bytes.substr(0, 512));
        if (h.what == tar_header_info::status::malformed && h.error.empty()) __builtin_trap();
        if (h.what == tar_header_info::status::entry) {
            if (h.path.find('\0') != std::string::npos || h.path.size() > 256) __builtin_trap();
            if (h.kind == tar_kind::directory && h.size != 0) __builtin_trap();
            const auto again = parse_tar_header(bytes.substr(0, 512));
            if (again.path != h.path || again.size != h.size || again.kind != h.kind) __builtin_trap();
        }
    }
    const auto o = parse_pax(bytes);
    if (o.malformed && o.error.empty()) __builtin_trap();
    if (!o.malformed && o.path && (o.path->size() > max_tar_path_bytes || o.path->find('\0') != std::string::npos))
        __builtin_trap();
    (void)gnu_long_name(bytes);
    return 0;
}
