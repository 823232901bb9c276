#include "contents/tar_reader.hpp"

#include "contents/tar_writer.hpp"

#include <algorithm>

namespace cellgate::contents {

namespace {

// A NUL- or space-terminated octal field; nullopt if it is not one (GNU's
// base-256 sizes included: 8 GiB and more come through pax here).
std::optional<std::uint64_t> octal_field(std::string_view f) {
    std::size_t i = 0;
    while (i < f.size() && f[i] == ' ') ++i;
    std::uint64_t v = 0;
    std::size_t digits = 0;
    for (; i < f.size() && f[i] >= '0' && f[i] <= '7'; ++i, ++digits) {
        if (v >> 60) return std::nullopt;
        v = v * 8 + static_cast<std::uint64_t>(f[i] - '0');
    }
    for (; i < f.size(); ++i)
        if (f[i] != ' ' && f[i] != '\0') return std::nullopt;
    if (digits == 0) return std::nullopt;
    return v;
}

std::string_view c_string(std::string_view f) { return f.substr(0, std::min(f.find('\0'), f.size())); }

}  // namespace

tar_header_info parse_tar_header(std::string_view b) {
    tar_header_info h;
    auto fail = [&h](std::string why) {
        h.what = tar_header_info::status::malformed;
        h.error = std::move(why);
        return h;
    };
    if (b.size() != tar_block) return fail("a header is 512 bytes");
    if (std::all_of(b.begin(), b.end(), [](char c) { return c == '\0'; })) {
        h.what = tar_header_info::status::end;
        return h;
    }
    const auto sum = octal_field(b.substr(148, 8));
    if (!sum) return fail("a header's checksum is not a number");
    unsigned actual = 0;
    for (std::size_t i = 0; i < tar_block; ++i) actual += (i >= 148 && i < 156) ? 32u : static_cast<unsigned char>(b[i]);
    if (*sum != actual) return fail("a header's checksum does not match (not a tar archive, or a damaged one)");
    const auto size = octal_field(b.substr(124, 12));
    if (!size) return fail("a header's size is not an octal number");
    h.size = *size;
    h.typeflag = b[156];
    std::string path(c_string(b.substr(0, 100)));
    if (b.substr(257, 5) == "ustar") {
        const auto prefix = c_string(b.substr(345, 155));
        if (!prefix.empty()) path = std::string(prefix) + "/" + path;
    }
    h.path = std::move(path);
    h.link_target = std::string(c_string(b.substr(157, 100)));
    switch (h.typeflag) {
        case '0': case '\0': case '7': h.kind = tar_kind::file; break;
        case '5': h.kind = tar_kind::directory; break;
        case 'x': h.kind = tar_kind::pax; break;
        case 'g': h.kind = tar_kind::pax_global; break;
        case 'L': h.kind = tar_kind::gnu_long_name; break;
        case '1': h.kind = tar_kind::hard_link; break;
        default: h.kind = tar_kind::other; break;
    }
    // Old tars mark directories by a trailing '/' on a regular entry.
    if (h.kind == tar_kind::file && !h.path.empty() && h.path.back() == '/') h.kind = tar_kind::directory;
    if (h.kind == tar_kind::directory) h.size = 0;  // a directory's "size" is never data (a link's data, if any, is skipped)
    h.what = tar_header_info::status::entry;
    return h;
}

pax_overrides parse_pax(std::string_view data) {
    pax_overrides o;
    auto fail = [&o](std::string why) {
        o.malformed = true;
        o.error = std::move(why);
        return o;
    };
    while (!data.empty()) {
        // "<len> key=value\n", len counting the whole record.
        const auto space = data.find(' ');
        if (space == std::string_view::npos || space == 0 || space > 20) return fail("a pax record without its length");
        std::uint64_t len = 0;
        for (std::size_t i = 0; i < space; ++i) {
            if (data[i] < '0' || data[i] > '9') return fail("a pax record's length is not a number");
            len = len * 10 + static_cast<std::uint64_t>(data[i] - '0');
            if (len > data.size()) return fail("a pax record runs past its header");
        }
        if (len <= space + 1 || data[len - 1] != '\n') return fail("a pax record does not end where its length says");
        const auto record = data.substr(space + 1, len - space - 2);
        data.remove_prefix(len);
        const auto eq = record.find('=');
        if (eq == std::string_view::npos) return fail("a pax record without '='");
        const auto key = record.substr(0, eq), value = record.substr(eq + 1);
        if (key == "path" || key == "linkpath") {
            if (value.size() > max_tar_path_bytes || value.find('\0') != std::string_view::npos)
                return fail("a pax path is too long or holds a NUL");
            (key == "path" ? o.path : o.link_target) = std::string(value);
        } else if (key == "size") {
            std::uint64_t v = 0;
            if (value.empty() || value.size() > 19) return fail("a pax size is not a number");
            for (const char c : value) {
                if (c < '0' || c > '9') return fail("a pax size is not a number");
                v = v * 10 + static_cast<std::uint64_t>(c - '0');
            }
            o.size = v;
        }
        // Other keys (mtime, uid, uname, xattrs, …) do not matter here.
    }
    return o;
}

std::string gnu_long_name(std::string_view data) { return std::string(c_string(data)); }

}  // namespace cellgate::contents
