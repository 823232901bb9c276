#include "contents/workspace_import.hpp"

#include "contents/beneath.hpp"
#include "contents/tar_reader.hpp"
#include "contents/tar_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

namespace cellgate::contents {

namespace {

[[noreturn]] void malformed(const std::string& why) { throw contents_error(error_kind::bad_path, "the archive: " + why); }

std::string read_at(int fd, std::uint64_t offset, std::uint64_t n) {
    std::string out(n, '\0');
    std::uint64_t got = 0;
    while (got < n) {
        const auto r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) malformed("it ends in the middle of an entry");
        got += static_cast<std::uint64_t>(r);
    }
    return out;
}

void write_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
        const auto w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            const int e = errno;
            if (e == ENOSPC || e == EDQUOT || e == EFBIG) throw contents_error(error_kind::no_space, "the workspace is full");
            throw contents_error(error_kind::io, std::string("writing a file: ") + std::strerror(e));
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

// "./a//b/" → "a/b"; what check_path then judges.
std::string tidy(std::string p) {
    while (p.rfind("./", 0) == 0) p.erase(0, 2);
    while (!p.empty() && p.back() == '/') p.pop_back();
    if (p == ".") p.clear();
    return p;
}

}  // namespace

import_result import_tar(contents_store& store, std::string_view root_in, int fd, std::uint64_t size,
                         std::uint64_t max_entries, std::uint64_t base) {
    const auto root = contents_store::check_path(root_in);
    if (!root.empty() && !store.exists(root)) {
        store.make_parents(root);
        store.make_dir(root);
    }
    if (!root.empty() && store.stat(root).type != entry_type::directory)
        throw contents_error(error_kind::conflict, "'" + root + "' is not a directory");
    import_result r;
    auto skip = [&r](std::string path, std::string why) {
        ++r.skipped_count;
        if (r.skipped.size() < 100) r.skipped.push_back({std::move(path), std::move(why)});
    };
    std::optional<std::string> next_path, next_link;
    std::set<std::string> imported;  // files this archive wrote: what its hard links may name
    std::uint64_t next_size = 0;  // a pax size for the next entry, when has_next_size
    bool has_next_size = false;
    std::uint64_t entries = 0;
    std::vector<char> buf(1 << 16);
    for (std::uint64_t off = 0; off + tar_block <= size;) {
        const auto h = parse_tar_header(read_at(fd, base + off, tar_block));
        off += tar_block;
        if (h.what == tar_header_info::status::end) break;
        if (h.what == tar_header_info::status::malformed) malformed(h.error);
        const std::uint64_t data_size = h.kind == tar_kind::pax || h.kind == tar_kind::gnu_long_name ? h.size
                                                                                                        : (has_next_size ? next_size : h.size);
        const std::uint64_t data_off = off;
        const std::uint64_t padded = data_size + (tar_block - data_size % tar_block) % tar_block;
        if (padded > size - off) malformed("it ends in the middle of '" + h.path.substr(0, 200) + "'");
        off += padded;
        if (h.kind == tar_kind::pax || h.kind == tar_kind::gnu_long_name) {
            if (data_size > max_tar_meta_bytes) malformed("an extended header over 64 KiB");
            const auto data = read_at(fd, base + data_off, data_size);
            if (h.kind == tar_kind::gnu_long_name) {
                next_path = gnu_long_name(data);
                continue;
            }
            const auto o = parse_pax(data);
            if (o.malformed) malformed(o.error);
            if (o.path) next_path = o.path;
            if (o.link_target) next_link = o.link_target;
            if (o.size) {
                next_size = *o.size;
                has_next_size = true;
            }
            continue;
        }
        if (h.kind == tar_kind::pax_global) continue;
        const auto named = next_path.value_or(h.path);
        const auto link_target = next_link.value_or(h.link_target);
        next_path.reset();
        next_link.reset();
        has_next_size = false;
        if (++entries > max_entries)
            throw contents_error(error_kind::too_large, "the archive holds more than " + std::to_string(max_entries) + " entries");
        if (h.kind == tar_kind::other) {
            skip(named, "symbolic links, devices and FIFOs are not imported");
            continue;
        }
        const auto rel = tidy(named);
        if (rel.empty()) continue;  // the archive's own root
        std::string path;
        try {
            path = contents_store::check_path(root.empty() ? rel : root + "/" + rel);
            if (named.size() > max_tar_path_bytes || named.front() == '/') throw contents_error(error_kind::bad_path, "");
        } catch (const contents_error&) {
            skip(named.substr(0, 300), "an absolute path, '..' or a malformed name");
            continue;
        }
        try {
            if (h.kind == tar_kind::directory) {
                if (!store.exists(path)) {
                    store.make_parents(path);
                    store.make_dir(path);
                } else if (store.stat(path).type != entry_type::directory) {
                    skip(path, "a file is in the way");
                    continue;
                }
                ++r.directories;
                continue;
            }
            // A hard link becomes a copy of the file it names, which this
            // archive must have written before it: no link is ever made, and
            // the copy counts against the workspace's cap like any file.
            int from = fd;
            std::uint64_t from_off = base + data_off, length = data_size;
            beneath::unique_fd linked;
            if (h.kind == tar_kind::hard_link) {
                std::string target;
                try {
                    const auto t = tidy(link_target);
                    target = contents_store::check_path(root.empty() ? t : root + "/" + t);
                } catch (const contents_error&) {
                }
                if (target.empty() || !imported.count(target)) {
                    skip(path, "a hard link to a file that is not earlier in the archive");
                    continue;
                }
                linked = beneath::unique_fd(store.open_for_read(target, length));
                from = linked.get();
                from_off = 0;
            }
            store.make_parents(path);
            bool created = false;
            beneath::unique_fd out(store.open_for_write(path, created));
            for (std::uint64_t left = length, at = from_off; left > 0;) {
                const auto n = ::pread(from, buf.data(), static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size())),
                                       static_cast<off_t>(at));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    if (from != fd) break;  // the linked file shrank meanwhile
                    malformed("it ends in the middle of '" + path + "'");
                }
                write_all(out.get(), buf.data(), static_cast<std::size_t>(n));
                left -= static_cast<std::uint64_t>(n);
                at += static_cast<std::uint64_t>(n);
            }
            if (imported.size() < max_entries) imported.insert(path);
            ++r.files;
            r.bytes += length;
        } catch (const contents_error& e) {
            // A link or special file the kernel put in the way, or a directory
            // where a file goes: that entry only. Anything else ends the import.
            if (e.kind() != error_kind::forbidden && e.kind() != error_kind::conflict) throw;
            skip(path, e.what());
        }
    }
    return r;
}

}  // namespace cellgate::contents
