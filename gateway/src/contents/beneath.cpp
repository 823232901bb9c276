#include "contents/beneath.hpp"

#include <sys/syscall.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <random>
#include <system_error>

namespace cellgate::contents::beneath {

bool is_valid_utf8(std::string_view s) noexcept {
    static constexpr std::array<std::uint32_t, 5> min_code_point{0, 0, 0x80, 0x800, 0x10000};
    std::size_t i = 0;
    while (i < s.size()) {
        const auto lead = static_cast<std::uint32_t>(static_cast<unsigned char>(s[i]));
        if (lead < 0x80) {
            ++i;
            continue;
        }
        std::size_t len = 0;
        std::uint32_t cp = 0;
        if ((lead & 0xE0u) == 0xC0u) {
            len = 2;
            cp = lead & 0x1Fu;
        } else if ((lead & 0xF0u) == 0xE0u) {
            len = 3;
            cp = lead & 0x0Fu;
        } else if ((lead & 0xF8u) == 0xF0u) {
            len = 4;
            cp = lead & 0x07u;
        } else {
            return false;
        }
        if (s.size() - i < len) return false;
        for (std::size_t k = 1; k < len; ++k) {
            const auto cont = static_cast<std::uint32_t>(static_cast<unsigned char>(s[i + k]));
            if ((cont & 0xC0u) != 0x80u) return false;
            cp = (cp << 6) | (cont & 0x3Fu);
        }
        // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
        if (cp < min_code_point[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

std::string shown(std::string_view path) {
    constexpr std::size_t max_shown_bytes = 200;
    const bool utf8 = is_valid_utf8(path);
    std::size_t cut = std::min(path.size(), max_shown_bytes);
    while (utf8 && cut < path.size() && cut > 0 &&
           (static_cast<unsigned char>(path[cut]) & 0xC0u) == 0x80u)
        --cut;
    std::string out;
    out.reserve(cut + 3);
    for (std::size_t i = 0; i < cut; ++i) {
        const auto c = static_cast<unsigned char>(path[i]);
        out.push_back(c < 0x20 || c == 0x7F || (!utf8 && c >= 0x80) ? '?' : path[i]);
    }
    if (cut < path.size()) out += "...";
    return out;
}

error_kind kind_for_errno(int err) noexcept {
    switch (err) {
    case ENOENT:
    case ENOTDIR: return error_kind::not_found;
    case EEXIST:
    case ENOTEMPTY:
    case EISDIR: return error_kind::conflict;  // a directory where a file was meant
    case ELOOP:
    case EXDEV:
    case EACCES:
    case EPERM:
    case ENXIO:   // opening a FIFO with no reader, or a socket
    case ENODEV:  // a device node
        return error_kind::forbidden;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return error_kind::no_space;
    case ENAMETOOLONG:
    case EINVAL: return error_kind::bad_path;
    default: return error_kind::io;
    }
}

[[noreturn]] void fail(error_kind kind, std::string_view action, std::string_view rel,
                       std::string_view why) {
    std::string message = "cannot ";
    message += action;
    message += " '";
    message += shown(rel);
    message += "': ";
    message += why;
    throw contents_error(kind, message);
}

[[noreturn]] void fail_errno(int err, std::string_view action, std::string_view rel) {
    fail(kind_for_errno(err), action, rel, std::generic_category().message(err));
}

int openat2_raw(int dir_fd, const char* path, std::uint64_t flags, mode_t mode) noexcept {
    open_how how{};
    how.flags = flags;
    how.mode = mode;
    how.resolve = resolve_flags;
    // EAGAIN: the kernel could not rule out a racing rename during the lookup;
    // it asks the caller to try again.
    for (int attempt = 0;; ++attempt) {
        const long fd = ::syscall(SYS_openat2, dir_fd, path, &how, sizeof how);
        if (fd >= 0) return static_cast<int>(fd);
        if ((errno != EAGAIN && errno != EINTR) || attempt >= 8) return -1;
    }
}

const char* at_path(const std::string& rel) noexcept { return rel.empty() ? "." : rel.c_str(); }

unique_fd open_beneath(int dir_fd, const std::string& path, int flags, std::string_view action,
                       std::string_view rel, mode_t mode) {
    const int fd = openat2_raw(dir_fd, at_path(path), open_flags(flags), mode);
    if (fd < 0) fail_errno(errno, action, rel);
    return unique_fd(fd);
}

unique_fd open_dir_path(int root_fd, const std::string& dir, std::string_view action,
                        std::string_view rel) {
    return open_beneath(root_fd, dir, O_PATH | O_DIRECTORY | O_CLOEXEC, action, rel);
}

unique_fd open_dir_readable(int dir_fd, const std::string& path, std::string_view action,
                            std::string_view rel) {
    return open_beneath(dir_fd, path, dir_read_flags, action, rel);
}

void require_regular(const struct stat& st, std::string_view action, std::string_view rel) {
    if (S_ISREG(st.st_mode)) return;
    if (S_ISDIR(st.st_mode)) fail(error_kind::conflict, action, rel, "is a directory");
    fail(error_kind::forbidden, action, rel, "not a regular file");
}

void fstat_or_fail(int fd, struct stat& st, std::string_view action, std::string_view rel) {
    if (::fstat(fd, &st) != 0) fail_errno(errno, action, rel);
}

unique_fd open_regular(int root_fd, const std::string& rel, int access, struct stat& st,
                       std::string_view action) {
    auto fd = open_beneath(root_fd, rel, access | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, action, rel);
    fstat_or_fail(fd.get(), st, action, rel);
    require_regular(st, action, rel);
    return fd;
}

split_path split_last(const std::string& rel) {
    const auto slash = rel.rfind('/');
    if (slash == std::string::npos) return {"", rel};
    return {rel.substr(0, slash), rel.substr(slash + 1)};
}

std::string join(const std::string& dir, std::string_view name) {
    std::string out = dir;
    if (!out.empty()) out.push_back('/');
    out += name;
    return out;
}

std::int64_t to_ns(const timespec& t) noexcept {
    // A kernel can set timestamps past 2262, which would overflow int64 ns.
    constexpr std::int64_t ns_per_s = 1'000'000'000;
    constexpr std::int64_t max_s = std::numeric_limits<std::int64_t>::max() / ns_per_s - 1;
    if (t.tv_sec > max_s) return std::numeric_limits<std::int64_t>::max();
    if (t.tv_sec < -max_s) return std::numeric_limits<std::int64_t>::min();
    return static_cast<std::int64_t>(t.tv_sec) * ns_per_s + static_cast<std::int64_t>(t.tv_nsec);
}

entry_info info_from_stat(const struct stat& st, const std::string& rel) {
    entry_info info;
    info.path = rel;
    info.name = split_last(rel).name;
    info.mtime_ns = to_ns(st.st_mtim);
    info.ctime_ns = to_ns(st.st_ctim);
    if (S_ISDIR(st.st_mode)) {
        info.type = entry_type::directory;
        info.writable = (st.st_mode & S_IWUSR) != 0;
    } else if (S_ISREG(st.st_mode)) {
        info.type = entry_type::file;
        info.size = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
        info.writable = (st.st_mode & S_IWUSR) != 0;
    } else {
        info.type = entry_type::file;
        info.writable = false;
    }
    return info;
}

entry_info info_from_fd(int fd, const std::string& rel, std::string_view action) {
    struct stat st {};
    fstat_or_fail(fd, st, action, rel);
    return info_from_stat(st, rel);
}

bool needs_chown(std::uint32_t, std::uint32_t) noexcept { return ::geteuid() == 0; }

void give_to_owner(int fd, std::uint32_t uid, std::uint32_t gid, std::string_view action,
                   std::string_view rel) {
    if (!needs_chown(uid, gid)) return;
    if (::fchown(fd, uid, gid) != 0)
        fail(error_kind::io, action, rel,
             "cannot change owner: " + std::generic_category().message(errno));
}

void write_all(int fd, std::string_view data, std::string_view action, std::string_view rel) {
    std::size_t done = 0;
    while (done < data.size()) {
        const std::size_t chunk = std::min(data.size() - done, io_chunk_bytes * 16);
        const ssize_t n = ::write(fd, data.data() + done, chunk);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(errno, action, rel);
        }
        if (n == 0) fail(error_kind::io, action, rel, "write made no progress");
        done += static_cast<std::size_t>(n);
    }
}

void discard_created(int parent_fd, const std::string& name, bool directory) noexcept {
    ::unlinkat(parent_fd, name.c_str(), directory ? AT_REMOVEDIR : 0);
}

opened_file open_for_put(int root_fd, std::string_view path, bool append, std::uint32_t uid, std::uint32_t gid) {
    const std::string_view action = append ? "append to" : "write";
    opened_file f;
    f.rel = contents_store::check_path(path);
    const auto [parent, name] = split_last(f.rel);
    if (name.empty()) fail(error_kind::conflict, action, f.rel, "is the workspace root");
    f.name = name;
    f.parent_fd = open_dir_path(root_fd, parent, action, f.rel);

    const int mode_flags = O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0);
    // The kernel may delete the file between our create and open attempts;
    // a few rounds settle that without looping forever.
    for (int attempt = 0; attempt < 4 && f.fd.get() < 0; ++attempt) {
        int raw = openat2_raw(f.parent_fd.get(), f.name.c_str(), open_flags(mode_flags | O_CREAT | O_EXCL), new_file_mode);
        if (raw >= 0) {
            f.created = true;
            f.fd = unique_fd(raw);
            break;
        }
        if (errno != EEXIST) fail_errno(errno, action, f.rel);
        raw = openat2_raw(f.parent_fd.get(), f.name.c_str(), open_flags(mode_flags), 0);
        if (raw >= 0) {
            f.fd = unique_fd(raw);
            break;
        }
        if (errno != ENOENT) fail_errno(errno, action, f.rel);
    }
    if (f.fd.get() < 0) fail(error_kind::conflict, action, f.rel, "the file keeps changing");
    try {
        struct stat st {};
        fstat_or_fail(f.fd.get(), st, action, f.rel);
        require_regular(st, action, f.rel);
        if (f.created) give_to_owner(f.fd.get(), uid, gid, action, f.rel);
        // Truncating only after fstat: O_TRUNC at open time would act on
        // whatever the name turned out to be.
        if (!append && !f.created && ::ftruncate(f.fd.get(), 0) != 0) fail_errno(errno, action, f.rel);
    } catch (const contents_error&) {
        if (f.created) discard_created(f.parent_fd.get(), f.name, false);
        throw;
    }
    return f;
}

entry_info put_file(int root_fd, std::string_view path, std::string_view data, bool append,
                    std::uint32_t uid, std::uint32_t gid) {
    auto f = open_for_put(root_fd, path, append, uid, gid);
    const std::string_view action = append ? "append to" : "write";
    try {
        write_all(f.fd.get(), data, action, f.rel);
        return info_from_fd(f.fd.get(), f.rel, action);
    } catch (const contents_error&) {
        if (f.created) discard_created(f.parent_fd.get(), f.name, false);
        throw;
    }
}

std::string random_suffix() {
    static std::atomic<std::uint64_t> counter{0};
    std::random_device rd;
    const auto value = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ counter.fetch_add(1);
    char out[17];
    std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(value));
    return out;
}

void remove_children(int parent_fd, const std::string& name, const std::string& rel, int depth,
                     std::uint64_t& budget) {
    if (depth >= max_remove_depth)
        fail(error_kind::conflict, "remove", rel, "the directory tree is too deep");
    auto fd = open_dir_readable(parent_fd, name, "remove", rel);
    dir_stream dir(::fdopendir(fd.get()));
    if (!dir) fail_errno(errno, "remove", rel);
    fd.release();
    const int dir_fd = ::dirfd(dir.get());

    for (;;) {
        errno = 0;
        const dirent* entry = ::readdir(dir.get());
        if (entry == nullptr) {
            if (errno != 0) fail_errno(errno, "remove", rel);
            break;
        }
        const std::string child = entry->d_name;
        if (child == "." || child == "..") continue;
        if (--budget == 0) fail(error_kind::conflict, "remove", rel, "too many entries");
        const std::string child_rel = join(rel, child);

        bool is_dir = entry->d_type == DT_DIR;
        if (entry->d_type == DT_UNKNOWN) {
            struct stat st {};
            if (::fstatat(dir_fd, child.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
                if (errno == ENOENT) continue;
                fail_errno(errno, "remove", child_rel);
            }
            is_dir = S_ISDIR(st.st_mode);
        }
        // A symlink is unlinked as a name; what it points to is never touched.
        if (!is_dir) {
            if (::unlinkat(dir_fd, child.c_str(), 0) == 0 || errno == ENOENT) continue;
            if (errno != EISDIR) fail_errno(errno, "remove", child_rel);
            // Swapped for a directory since readdir: remove it as one.
        }
        remove_children(dir_fd, child, child_rel, depth + 1, budget);
        if (::unlinkat(dir_fd, child.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
            fail_errno(errno, "remove", child_rel);
    }
}

}  // namespace cellgate::contents::beneath
