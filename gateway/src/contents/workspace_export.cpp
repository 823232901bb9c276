#include "contents/workspace_export.hpp"

#include "contents/beneath.hpp"
#include "contents/tar_writer.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

namespace cellgate::contents {

namespace {

void write_all(int fd, const char* data, std::size_t n, std::uint64_t& total) {
    while (n > 0) {
        const auto w = ::write(fd, data, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw contents_error(error_kind::io, std::string("writing the archive: ") + std::strerror(errno));
        }
        data += w;
        n -= static_cast<std::size_t>(w);
        total += static_cast<std::uint64_t>(w);
    }
}

void write_all(int fd, const std::string& s, std::uint64_t& total) { write_all(fd, s.data(), s.size(), total); }

std::string relative_to(std::string_view root, const std::string& path) {
    if (root.empty()) return path;
    return path.substr(root.size() + 1);
}

}  // namespace

export_result export_tar(const contents_store& store, std::string_view root_in, int fd, std::uint64_t max_entries,
                         std::uint64_t max_data_bytes) {
    const auto root = contents_store::check_path(root_in);
    if (store.stat(root).type != entry_type::directory)
        throw contents_error(error_kind::conflict, "'" + root + "' is not a directory");
    export_result r;
    std::deque<std::string> dirs{root};
    std::vector<char> buf(1 << 16);
    std::map<std::pair<dev_t, ino_t>, std::string> named;  // files with more names: the first one written
    while (!dirs.empty()) {
        const auto dir = std::move(dirs.front());
        dirs.pop_front();
        const auto budget = max_entries - r.entries - r.skipped;
        const auto listing = store.list(dir, budget);
        if (listing.truncated)
            throw contents_error(error_kind::too_large, "the workspace holds more than " + std::to_string(max_entries) +
                                                            " entries; export one of its directories (?path=)");
        for (const auto& e : listing.entries) {
            tar_entry t;
            t.path = relative_to(root, e.path);
            t.mtime_s = e.mtime_ns / 1000000000;
            if (e.type == entry_type::directory) {
                t.directory = true;
                t.mode = 0755;
                write_all(fd, tar_header(t), r.bytes);
                dirs.push_back(e.path);
                ++r.entries;
                continue;
            }
            std::uint64_t size = 0;
            int in = -1;
            try {
                in = store.open_for_read(e.path, size);  // refuses symlinks and special files
            } catch (const contents_error&) {
                ++r.skipped;
                continue;
            }
            beneath::unique_fd guard(in);
            struct stat st {};
            if (::fstat(in, &st) != 0) {
                ++r.skipped;
                continue;
            }
            if (st.st_nlink > 1) {
                const auto [first, fresh] = named.try_emplace({st.st_dev, st.st_ino}, t.path);
                if (!fresh) {
                    t.link_target = first->second;
                    write_all(fd, tar_header(t), r.bytes);
                    ++r.entries;
                    ++r.links;
                    continue;
                }
            }
            if (size > max_data_bytes - r.data_bytes) {
                const auto on_disk = static_cast<std::uint64_t>(st.st_blocks) * 512;
                throw contents_error(error_kind::too_large,
                                     "the archive would hold more than " + std::to_string(max_data_bytes) +
                                         " bytes of file data, the workspace's cap: '" + t.path + "' is " +
                                         std::to_string(size) + " bytes" +
                                         (on_disk < size ? " (" + std::to_string(on_disk) + " on disk: a sparse file)" : "") +
                                         "; export one of its directories (?path=)");
            }
            r.data_bytes += size;
            t.size = size;
            write_all(fd, tar_header(t), r.bytes);
            // Exactly `size` bytes, as the header says: a file that grows
            // meanwhile is cut there, one that shrinks is padded with zeros.
            for (std::uint64_t left = size; left > 0;) {
                const auto n = ::read(in, buf.data(), static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size())));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    std::fill(buf.begin(), buf.end(), '\0');
                    while (left > 0) {
                        const auto z = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
                        write_all(fd, buf.data(), z, r.bytes);
                        left -= z;
                    }
                    break;
                }
                write_all(fd, buf.data(), static_cast<std::size_t>(n), r.bytes);
                left -= static_cast<std::uint64_t>(n);
            }
            write_all(fd, tar_padding(size), r.bytes);
            ++r.entries;
        }
    }
    write_all(fd, tar_end(), r.bytes);
    return r;
}

}  // namespace cellgate::contents
