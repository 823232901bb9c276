#include "contents/contents_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <system_error>
#include <utility>

// Why this is safe against a hostile kernel that owns the workspace:
// - Every path is resolved by openat2 beneath an O_PATH descriptor of the
//   root with RESOLVE_NO_SYMLINKS, so a symlink anywhere (even swapped in
//   between two of our syscalls) fails the lookup instead of being followed.
// - Names inside a directory are only ever used as a single validated
//   component with *at() calls on a directory fd we resolved ourselves, and
//   creation is O_EXCL, so a planted symlink or dangling link is never
//   created through.
// - Files are opened O_NONBLOCK (a FIFO, or a file with a lease the kernel
//   took, cannot block us) and fstat'ed before use; only regular files are
//   read or written.
// - Hard links are harmless: the workspace is its own filesystem, so link(2)
//   cannot make a name here for a host file (EXDEV), and RESOLVE_NO_XDEV
//   keeps us from crossing into any mount below the root.

namespace cellgate::contents {

namespace {

constexpr std::uint64_t resolve_flags =
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
constexpr std::size_t max_path_bytes = 4096;
constexpr std::size_t max_name_bytes = 255;
// A kernel can nest directories far deeper than we want to recurse.
constexpr int max_remove_depth = 256;
// Bounds a recursive remove that a kernel keeps feeding with new entries.
constexpr std::uint64_t max_remove_entries = std::uint64_t{1} << 24;
constexpr int max_untitled_tries = 10000;
constexpr std::size_t io_chunk_bytes = 64 * 1024;
constexpr mode_t new_file_mode = 0644;
constexpr mode_t new_dir_mode = 0755;

class unique_fd {
public:
    unique_fd() = default;
    explicit unique_fd(int fd) noexcept : fd_(fd) {}
    ~unique_fd() { reset(); }
    unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& other) noexcept {
        if (this != &other) {
            reset();
            fd_ = std::exchange(other.fd_, -1);
        }
        return *this;
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;

    int get() const noexcept { return fd_; }
    int release() noexcept { return std::exchange(fd_, -1); }
    void reset() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
};

struct dir_closer {
    void operator()(DIR* d) const noexcept { ::closedir(d); }
};
using dir_stream = std::unique_ptr<DIR, dir_closer>;

constexpr std::uint64_t open_flags(int flags) noexcept {
    return static_cast<std::uint64_t>(static_cast<unsigned>(flags));
}

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

// A path as it may appear in an error message: a message can end up in a JSON
// body or a log line, so control bytes and invalid UTF-8 are masked and very
// long paths cut.
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

// Opens `path` (relative to dir_fd) or throws naming `rel`, the full relative path.
unique_fd open_beneath(int dir_fd, const std::string& path, int flags, std::string_view action,
                       std::string_view rel, mode_t mode = 0) {
    const int fd = openat2_raw(dir_fd, at_path(path), open_flags(flags), mode);
    if (fd < 0) fail_errno(errno, action, rel);
    return unique_fd(fd);
}

// O_PATH: enough for *at() calls and fstat, and never opens the object itself.
unique_fd open_dir_path(int root_fd, const std::string& dir, std::string_view action,
                        std::string_view rel) {
    return open_beneath(root_fd, dir, O_PATH | O_DIRECTORY | O_CLOEXEC, action, rel);
}

// No O_NOFOLLOW: with O_DIRECTORY it turns a final symlink into ENOTDIR
// ("not found"); without it RESOLVE_NO_SYMLINKS reports ELOOP ("forbidden").
constexpr int dir_read_flags = O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC;

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

struct split_path {
    std::string parent;  // "" for the root
    std::string name;    // "" when the path is the root
};

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

// Symlinks and special files are shown as read-only empty files: their
// targets or contents are never looked at.
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

// Only a root gateway (launcher in process) hands new files to the kernel's
// uid. An unprivileged gateway reaches workspaces through the launcher
// service's id-mapped views, where what it creates already belongs to the
// kernel on disk (and it could not chown anyway).
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

// Removes a name we just created after a later step failed, so a failed
// write does not leave a half-made file behind. Best effort: whatever the
// kernel put there meanwhile is its own.
void discard_created(int parent_fd, const std::string& name, bool directory) noexcept {
    ::unlinkat(parent_fd, name.c_str(), directory ? AT_REMOVEDIR : 0);
}

// Opens a regular file for writing, creating it (exclusively, so a planted
// symlink is never created through) when absent; truncates an existing one
// unless appending. The result is a checked, owned regular file.
struct opened_file {
    unique_fd fd;
    unique_fd parent_fd;
    std::string name;
    std::string rel;
    bool created = false;
};

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

// Writes or appends to a regular file (see open_for_put).
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

}  // namespace

contents_store::contents_store(std::string root, std::uint32_t owner_uid, std::uint32_t owner_gid)
    : uid_(owner_uid), gid_(owner_gid) {
    // The message leaves out `root`: it is a host path.
    root_fd_ = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd_ < 0)
        throw contents_error(error_kind::io, "cannot open the workspace root: " +
                                                 std::generic_category().message(errno));
    // Probe openat2 once so a kernel without it (< 5.6) fails here, not per request.
    const int probe = openat2_raw(root_fd_, ".", open_flags(O_PATH | O_DIRECTORY | O_CLOEXEC), 0);
    if (probe < 0) {
        const int err = errno;
        ::close(root_fd_);
        root_fd_ = -1;
        throw contents_error(error_kind::io, "cannot resolve paths beneath the workspace root: " +
                                                 std::generic_category().message(err));
    }
    ::close(probe);
}

contents_store::~contents_store() {
    if (root_fd_ >= 0) ::close(root_fd_);
}

std::string contents_store::check_path(std::string_view relative) {
    const auto refuse = [relative](std::string_view why) {
        throw contents_error(error_kind::bad_path, "bad path '" + shown(relative) + "': " +
                                                       std::string(why));
    };
    if (relative.empty()) return {};
    if (relative.size() > max_path_bytes) refuse("too long");
    if (relative.front() == '/') refuse("must be relative");
    if (relative.find('\0') != std::string_view::npos) refuse("contains a NUL byte");
    if (relative.find('\\') != std::string_view::npos) refuse("contains a backslash");
    // Names go back to clients in JSON models, which must be UTF-8.
    if (!is_valid_utf8(relative)) refuse("not valid UTF-8");
    std::size_t start = 0;
    for (;;) {
        const auto slash = relative.find('/', start);
        const auto part = relative.substr(start, slash == std::string_view::npos
                                                     ? std::string_view::npos
                                                     : slash - start);
        if (part.empty()) refuse("empty component");
        if (part == "." || part == "..") refuse("'.' and '..' are not allowed");
        if (part.size() > max_name_bytes) refuse("a component is too long");
        if (slash == std::string_view::npos) break;
        start = slash + 1;
    }
    // Nothing is rewritten: anything that would need normalising is refused.
    return std::string(relative);
}

entry_info contents_store::stat(std::string_view path) const {
    const std::string rel = check_path(path);
    // O_PATH opens nothing (a FIFO cannot block); RESOLVE_NO_SYMLINKS makes
    // a symlink as the last component fail with ELOOP.
    const auto fd = open_beneath(root_fd_, rel, O_PATH | O_CLOEXEC, "stat", rel);
    struct stat st {};
    fstat_or_fail(fd.get(), st, "stat", rel);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        fail(error_kind::forbidden, "stat", rel, "not a regular file or directory");
    return info_from_stat(st, rel);
}

// Anything at the name counts, symlinks included, so callers never pick a
// name that is taken. Only "absent" is false: a symlink or file in the way
// of the parent throws like the other operations.
bool contents_store::exists(std::string_view path) const {
    const std::string rel = check_path(path);
    if (rel.empty()) return true;
    const auto [parent, name] = split_last(rel);
    const int parent_fd = openat2_raw(root_fd_, at_path(parent),
                                      open_flags(O_PATH | O_DIRECTORY | O_CLOEXEC), 0);
    if (parent_fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return false;
        fail_errno(errno, "check", rel);
    }
    const unique_fd parent_guard(parent_fd);
    struct stat st {};
    if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return true;
    if (errno == ENOENT || errno == ENOTDIR) return false;
    fail_errno(errno, "check", rel);
}

listing contents_store::list(std::string_view dir, std::size_t max_entries) const {
    const std::string rel = check_path(dir);
    auto fd = open_dir_readable(root_fd_, rel, "list", rel);
    dir_stream stream(::fdopendir(fd.get()));
    if (!stream) fail_errno(errno, "list", rel);
    fd.release();
    const int dir_fd = ::dirfd(stream.get());

    listing out;
    for (;;) {
        errno = 0;
        const dirent* entry = ::readdir(stream.get());
        if (entry == nullptr) {
            if (errno != 0) fail_errno(errno, "list", rel);
            break;
        }
        const std::string_view name = entry->d_name;
        if (name == "." || name == "..") continue;
        // Such a name cannot be put in a JSON model; hiding it beats failing
        // the whole listing.
        if (!is_valid_utf8(name)) continue;
        // One more name is enough to know the budget is short: it is not stat'ed.
        if (out.entries.size() >= max_entries) {
            out.truncated = true;
            break;
        }
        struct stat st {};
        if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) continue;  // removed since readdir
            fail_errno(errno, "list", join(rel, name));
        }
        out.entries.push_back(info_from_stat(st, join(rel, name)));
    }
    std::sort(out.entries.begin(), out.entries.end(),
              [](const entry_info& a, const entry_info& b) { return a.name < b.name; });
    return out;
}

std::string contents_store::read(std::string_view path, std::uint64_t max_bytes) const {
    const std::string rel = check_path(path);
    struct stat st {};
    const auto fd = open_regular(root_fd_, rel, O_RDONLY, st, "read");
    const auto size = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    if (size > max_bytes) fail(error_kind::too_large, "read", rel, "the file is too large");

    std::string out;
    out.reserve(static_cast<std::size_t>(size));
    std::string buffer(io_chunk_bytes, '\0');
    for (;;) {
        const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(errno, "read", rel);
        }
        if (n == 0) break;
        const auto got = static_cast<std::size_t>(n);
        // The kernel may still be writing the file: the cap holds, not the size we saw.
        if (out.size() + got > max_bytes)
            fail(error_kind::too_large, "read", rel, "the file is too large");
        out.append(buffer.data(), got);
    }
    return out;
}

entry_info contents_store::write(std::string_view path, std::string_view data) {
    return put_file(root_fd_, path, data, false, uid_, gid_);
}

entry_info contents_store::append(std::string_view path, std::string_view data) {
    return put_file(root_fd_, path, data, true, uid_, gid_);
}

entry_info contents_store::make_dir(std::string_view path) {
    const std::string rel = check_path(path);
    const auto [parent, name] = split_last(rel);
    if (name.empty()) fail(error_kind::conflict, "create", rel, "is the workspace root");
    const auto parent_fd = open_dir_path(root_fd_, parent, "create", rel);
    if (::mkdirat(parent_fd.get(), name.c_str(), new_dir_mode) != 0)
        fail_errno(errno, "create", rel);
    try {
        const auto fd = open_dir_readable(parent_fd.get(), name, "create", rel);
        give_to_owner(fd.get(), uid_, gid_, "create", rel);
        return info_from_fd(fd.get(), rel, "create");
    } catch (const contents_error&) {
        discard_created(parent_fd.get(), name, true);
        throw;
    }
}

void contents_store::make_parents(std::string_view path) {
    const std::string rel = check_path(path);
    const std::string parents = split_last(rel).parent;
    if (parents.empty()) return;

    auto current = open_dir_path(root_fd_, "", "create", rel);
    std::string done;
    std::size_t start = 0;
    while (start <= parents.size()) {
        const auto slash = parents.find('/', start);
        const auto end = slash == std::string::npos ? parents.size() : slash;
        const std::string part = parents.substr(start, end - start);
        done = join(done, part);
        start = end + 1;

        const bool created = ::mkdirat(current.get(), part.c_str(), new_dir_mode) == 0;
        if (!created && errno != EEXIST) fail_errno(errno, "create", done);
        // Opened again by name: if the kernel swapped in a symlink, this fails.
        const int flags = created ? dir_read_flags : O_PATH | O_DIRECTORY | O_CLOEXEC;
        const int next = openat2_raw(current.get(), part.c_str(), open_flags(flags), 0);
        if (next < 0) {
            if (errno == ENOTDIR) fail(error_kind::conflict, "create", done, "not a directory");
            fail_errno(errno, "create", done);
        }
        current = unique_fd(next);
        if (created) give_to_owner(current.get(), uid_, gid_, "create", done);
    }
}

void contents_store::remove(std::string_view path, bool recursive) {
    const std::string rel = check_path(path);
    const auto [parent, name] = split_last(rel);
    if (name.empty()) fail(error_kind::forbidden, "remove", rel, "is the workspace root");
    const auto parent_fd = open_dir_path(root_fd_, parent, "remove", rel);

    struct stat st {};
    if (::fstatat(parent_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        fail_errno(errno, "remove", rel);
    if (!S_ISDIR(st.st_mode)) {
        if (::unlinkat(parent_fd.get(), name.c_str(), 0) != 0) fail_errno(errno, "remove", rel);
        return;
    }
    if (recursive) {
        std::uint64_t budget = max_remove_entries;
        remove_children(parent_fd.get(), name, rel, 0, budget);
    }
    if (::unlinkat(parent_fd.get(), name.c_str(), AT_REMOVEDIR) != 0)
        fail_errno(errno, "remove", rel);
}

entry_info contents_store::rename(std::string_view from, std::string_view to, bool replace) {
    const std::string from_rel = check_path(from);
    const std::string to_rel = check_path(to);
    const auto [from_parent, from_name] = split_last(from_rel);
    const auto [to_parent, to_name] = split_last(to_rel);
    if (from_name.empty() || to_name.empty())
        fail(error_kind::forbidden, "rename", from_rel, "the workspace root cannot be renamed");
    const auto from_fd = open_dir_path(root_fd_, from_parent, "rename", from_rel);
    const auto to_fd = open_dir_path(root_fd_, to_parent, "rename to", to_rel);

    // RENAME_NOREPLACE: never replaces, so a symlink planted at `to` is
    // refused, not followed and not clobbered. Replacing acts on the name
    // only, so a symlink there is replaced, never followed.
    if (replace) {
        struct stat target {};
        if (::fstatat(to_fd.get(), to_name.c_str(), &target, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(target.st_mode))
            fail(error_kind::conflict, "rename to", to_rel, "is a directory");
    }
    if (::renameat2(from_fd.get(), from_name.c_str(), to_fd.get(), to_name.c_str(),
                    replace ? 0 : RENAME_NOREPLACE) != 0) {
        const int err = errno;
        if (err == EEXIST) fail(error_kind::conflict, "rename to", to_rel, "already exists");
        fail_errno(err, "rename", from_rel);
    }
    struct stat st {};
    if (::fstatat(to_fd.get(), to_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        fail_errno(errno, "stat", to_rel);
    return info_from_stat(st, to_rel);
}

entry_info contents_store::copy(std::string_view from, std::string_view to) {
    const std::string from_rel = check_path(from);
    const std::string to_rel = check_path(to);
    struct stat st {};
    const auto src = open_regular(root_fd_, from_rel, O_RDONLY, st, "copy");
    const auto [to_parent, to_name] = split_last(to_rel);
    if (to_name.empty()) fail(error_kind::conflict, "copy to", to_rel, "is the workspace root");
    const auto parent_fd = open_dir_path(root_fd_, to_parent, "copy to", to_rel);
    // Keeps the execute bits, drops set-id bits.
    const auto mode = static_cast<mode_t>(st.st_mode & 0777);
    auto dst = open_beneath(parent_fd.get(), to_name,
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                            "copy to", to_rel, mode);
    try {
        give_to_owner(dst.get(), uid_, gid_, "copy to", to_rel);
        // Bounded by the size at open time, so a source the kernel keeps
        // growing cannot make the copy endless.
        auto remaining = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
        std::string buffer(io_chunk_bytes, '\0');
        while (remaining > 0) {
            const auto want =
                static_cast<std::size_t>(std::min<std::uint64_t>(remaining, buffer.size()));
            const ssize_t n = ::read(src.get(), buffer.data(), want);
            if (n < 0) {
                if (errno == EINTR) continue;
                fail_errno(errno, "copy", from_rel);
            }
            if (n == 0) break;  // shrunk meanwhile
            write_all(dst.get(), std::string_view(buffer.data(), static_cast<std::size_t>(n)),
                      "copy to", to_rel);
            remaining -= static_cast<std::uint64_t>(n);
        }
        return info_from_fd(dst.get(), to_rel, "copy to");
    } catch (const contents_error&) {
        discard_created(parent_fd.get(), to_name, false);
        throw;
    }
}

int contents_store::open_for_write(std::string_view path, bool& created) {
    auto f = open_for_put(root_fd_, path, false, uid_, gid_);
    created = f.created;
    const int flags = ::fcntl(f.fd.get(), F_GETFL);
    if (flags >= 0) ::fcntl(f.fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    return f.fd.release();
}

int contents_store::open_temp_beside(std::string_view path, std::string& temp_out) {
    const std::string rel = check_path(path);
    const auto [parent, name] = split_last(rel);
    if (name.empty()) fail(error_kind::conflict, "write", rel, "is the workspace root");
    const auto parent_fd = open_dir_path(root_fd_, parent, "write", rel);
    struct stat st {};
    if (::fstatat(parent_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
        require_regular(st, "write", rel);
    else if (errno != ENOENT)
        fail_errno(errno, "write", rel);
    // A short fixed name, whatever the length of `name`; O_EXCL picks a fresh one.
    for (int attempt = 0; attempt < 16; ++attempt) {
        const std::string temp_name = ".cellgate-upload-" + random_suffix();
        const int raw = openat2_raw(parent_fd.get(), temp_name.c_str(),
                                    open_flags(O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC),
                                    new_file_mode);
        if (raw < 0) {
            if (errno == EEXIST) continue;
            fail_errno(errno, "write", rel);
        }
        unique_fd fd(raw);
        try {
            give_to_owner(fd.get(), uid_, gid_, "write", rel);
        } catch (const contents_error&) {
            discard_created(parent_fd.get(), temp_name, false);
            throw;
        }
        temp_out = join(parent, temp_name);
        return fd.release();
    }
    fail(error_kind::conflict, "write", rel, "no free temporary name");
}

int contents_store::open_for_read(std::string_view path, std::uint64_t& size_out) const {
    const std::string rel = check_path(path);
    struct stat st {};
    auto fd = open_regular(root_fd_, rel, O_RDONLY, st, "read");
    // O_NONBLOCK was only for the open; the caller gets a plain blocking fd.
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        fail_errno(errno, "read", rel);
    size_out = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    return fd.release();
}

std::string contents_store::untitled_name(std::string_view dir, std::string_view base,
                                          std::string_view ext) const {
    const std::string rel = check_path(dir);
    const std::string stem = base.empty() ? std::string("Untitled") : std::string(base);
    const auto dir_fd = open_dir_path(root_fd_, rel, "list", rel);
    for (int i = 0; i < max_untitled_tries; ++i) {
        std::string name = stem;
        if (i > 0) name += std::to_string(i);
        name += ext;
        if (name.find('/') != std::string::npos || check_path(name) != name)
            fail(error_kind::bad_path, "name a file in", rel, "bad base name or extension");
        struct stat st {};
        if (::fstatat(dir_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) return name;
            fail_errno(errno, "list", rel);
        }
    }
    fail(error_kind::conflict, "name a file in", rel, "no free untitled name");
}

std::string_view mime_type_for(std::string_view name) noexcept {
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 25> types{{
        {"txt", "text/plain"},
        {"csv", "text/csv"},
        {"tsv", "text/tab-separated-values"},
        {"json", "application/json"},
        {"ipynb", "application/x-ipynb+json"},
        {"py", "text/x-python"},
        {"md", "text/markdown"},
        {"html", "text/html"},
        {"htm", "text/html"},
        {"js", "text/javascript"},
        {"css", "text/css"},
        {"xml", "application/xml"},
        {"yaml", "application/yaml"},
        {"yml", "application/yaml"},
        {"svg", "image/svg+xml"},
        {"png", "image/png"},
        {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},
        {"webp", "image/webp"},
        {"pdf", "application/pdf"},
        {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
        {"xls", "application/vnd.ms-excel"},
        {"zip", "application/zip"},
        {"parquet", "application/vnd.apache.parquet"},
    }};
    constexpr std::string_view fallback = "application/octet-stream";

    const auto slash = name.rfind('/');
    const auto base = slash == std::string_view::npos ? name : name.substr(slash + 1);
    const auto dot = base.rfind('.');
    // As Python's splitext: a leading dot (".bashrc") starts no extension.
    if (dot == std::string_view::npos || dot == 0 || base.find_first_not_of('.') > dot)
        return fallback;
    const auto ext = base.substr(dot + 1);
    const auto lower = [](char c) noexcept {
        return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    for (const auto& [known, type] : types) {
        if (known.size() == ext.size() &&
            std::equal(known.begin(), known.end(), ext.begin(),
                       [&](char k, char e) { return k == lower(e); }))
            return type;
    }
    return fallback;
}

}  // namespace cellgate::contents
