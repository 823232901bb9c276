#include "contents/tar_writer.hpp"

#include <algorithm>
#include <cstring>

namespace cellgate::contents {

namespace {

// An octal field of `width` bytes: width - 1 digits (zero-padded; the
// callers keep values within them), then a NUL.
void octal(char* field, std::size_t width, std::uint64_t value) {
    for (std::size_t i = width - 1; i-- > 0; value >>= 3) field[i] = static_cast<char>('0' + (value & 7));
    field[width - 1] = '\0';
}

void copy_field(char* field, std::size_t width, std::string_view text) {
    std::memcpy(field, text.data(), std::min(width, text.size()));
}

// "<len> key=value\n", where len counts the whole record, itself included.
std::string pax_record(std::string_view key, std::string_view value) {
    const std::size_t rest = 1 + key.size() + 1 + value.size() + 1;  // ' ' key '=' value '\n'
    std::size_t len = rest + 1;
    while (std::to_string(len).size() + rest != len) len = std::to_string(len).size() + rest;
    return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

std::string ustar(std::string_view name, std::string_view prefix, char type, std::uint64_t size, std::int64_t mtime,
                  std::uint32_t mode, std::string_view link = {}) {
    std::string h(tar_block, '\0');
    char* b = h.data();
    copy_field(b, 100, name);
    copy_field(b + 157, 100, link);
    octal(b + 100, 8, mode & 07777);
    octal(b + 108, 8, 1000);  // uid and gid: the sandbox's user
    octal(b + 116, 8, 1000);
    octal(b + 124, 12, size);
    octal(b + 136, 12, static_cast<std::uint64_t>(std::max<std::int64_t>(mtime, 0)));
    b[156] = type;
    std::memcpy(b + 257, "ustar", 6);  // magic with its NUL
    std::memcpy(b + 263, "00", 2);
    copy_field(b + 265, 32, "user");
    copy_field(b + 297, 32, "user");
    copy_field(b + 345, 155, prefix);
    // The checksum counts its own field as spaces.
    std::memset(b + 148, ' ', 8);
    unsigned sum = 0;
    for (const char c : h) sum += static_cast<unsigned char>(c);
    octal(b + 148, 7, sum);  // six digits and a NUL, then a space
    b[155] = ' ';
    return h;
}

// Splits `path` into ustar's prefix (≤ 155) and name (≤ 100) at a '/', if it can.
bool split_ustar(std::string_view path, std::string_view& prefix, std::string_view& name) {
    if (path.size() <= 100) {
        prefix = {};
        name = path;
        return true;
    }
    // The shortest name that fits: the first '/' whose tail is ≤ 100 bytes.
    for (std::size_t slash = path.find('/'); slash != std::string_view::npos; slash = path.find('/', slash + 1)) {
        const auto tail = path.size() - slash - 1;
        if (tail <= 100) {
            if (slash == 0 || slash > 155 || tail == 0) return false;
            prefix = path.substr(0, slash);
            name = path.substr(slash + 1);
            return true;
        }
    }
    return false;
}

}  // namespace

std::string tar_header(const tar_entry& e) {
    const std::string path = e.directory ? e.path + "/" : e.path;
    const bool link = !e.directory && !e.link_target.empty();
    const std::uint64_t size = e.directory || link ? 0 : e.size;
    constexpr std::uint64_t max_ustar_size = 077777777777ULL;  // 11 octal digits: 8 GiB - 1
    std::string_view prefix, name;
    const bool fits = split_ustar(path, prefix, name);
    std::string out;
    const bool long_link = link && e.link_target.size() > 100;
    if (!fits || size > max_ustar_size || long_link) {
        std::string records;
        if (!fits) records += pax_record("path", path);
        if (long_link) records += pax_record("linkpath", e.link_target);
        if (size > max_ustar_size) records += pax_record("size", std::to_string(size));
        out += ustar("PaxHeader", "", 'x', records.size(), e.mtime_s, 0644);
        out += records;
        out += tar_padding(records.size());
        if (!fits) {
            // What an old reader shows: the path's tail.
            prefix = {};
            name = std::string_view(path).substr(path.size() > 100 ? path.size() - 100 : 0);
        }
    }
    const std::string_view target = long_link ? std::string_view(e.link_target).substr(0, 100) : std::string_view(e.link_target);
    out += ustar(name, prefix, e.directory ? '5' : link ? '1' : '0', size > max_ustar_size ? 0 : size, e.mtime_s, e.mode,
                 link ? target : std::string_view());
    return out;
}

std::string tar_padding(std::uint64_t data_size) {
    const auto rem = data_size % tar_block;
    return std::string(rem == 0 ? 0 : tar_block - rem, '\0');
}

std::string tar_end() { return std::string(2 * tar_block, '\0'); }

}  // namespace cellgate::contents
