#pragma once

// What every contents_store call is built from: descriptors resolved beneath
// the workspace root, typed checks on them, and errors that never show a
// host path. Internal to the contents room.
//
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

#include "contents/contents_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace cellgate::contents::beneath {

inline constexpr std::uint64_t resolve_flags =
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;

inline constexpr std::size_t max_path_bytes = 4096;

inline constexpr std::size_t max_name_bytes = 255;

// A kernel can nest directories far deeper than we want to recurse.
inline constexpr int max_remove_depth = 256;

// Bounds a recursive remove that a kernel keeps feeding with new entries.
inline constexpr std::uint64_t max_remove_entries = std::uint64_t{1} << 24;

inline constexpr int max_untitled_tries = 10000;

inline constexpr std::size_t io_chunk_bytes = 64 * 1024;

inline constexpr mode_t new_file_mode = 0644;

inline constexpr mode_t new_dir_mode = 0755;

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

inline constexpr std::uint64_t open_flags(int flags) noexcept {
    return static_cast<std::uint64_t>(static_cast<unsigned>(flags));
}

bool is_valid_utf8(std::string_view s) noexcept;

// A path as it may appear in an error message: a message can end up in a JSON
// body or a log line, so control bytes and invalid UTF-8 are masked and very
// long paths cut.
std::string shown(std::string_view path);

error_kind kind_for_errno(int err) noexcept;

[[noreturn]] void fail(error_kind kind, std::string_view action, std::string_view rel,
                       std::string_view why);

[[noreturn]] void fail_errno(int err, std::string_view action, std::string_view rel);

int openat2_raw(int dir_fd, const char* path, std::uint64_t flags, mode_t mode) noexcept;

const char* at_path(const std::string& rel) noexcept;

// Opens `path` (relative to dir_fd) or throws naming `rel`, the full relative path.
unique_fd open_beneath(int dir_fd, const std::string& path, int flags, std::string_view action,
                       std::string_view rel, mode_t mode = 0);

// O_PATH: enough for *at() calls and fstat, and never opens the object itself.
unique_fd open_dir_path(int root_fd, const std::string& dir, std::string_view action,
                        std::string_view rel);

// No O_NOFOLLOW: with O_DIRECTORY it turns a final symlink into ENOTDIR
// ("not found"); without it RESOLVE_NO_SYMLINKS reports ELOOP ("forbidden").
inline constexpr int dir_read_flags = O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC;

unique_fd open_dir_readable(int dir_fd, const std::string& path, std::string_view action,
                            std::string_view rel);

void require_regular(const struct stat& st, std::string_view action, std::string_view rel);

void fstat_or_fail(int fd, struct stat& st, std::string_view action, std::string_view rel);

unique_fd open_regular(int root_fd, const std::string& rel, int access, struct stat& st,
                       std::string_view action);

struct split_path {
    std::string parent;  // "" for the root
    std::string name;    // "" when the path is the root
};

split_path split_last(const std::string& rel);

std::string join(const std::string& dir, std::string_view name);

std::int64_t to_ns(const timespec& t) noexcept;

// Symlinks and special files are shown as read-only empty files: their
// targets or contents are never looked at.
entry_info info_from_stat(const struct stat& st, const std::string& rel);

entry_info info_from_fd(int fd, const std::string& rel, std::string_view action);

// Only a root gateway (launcher in process) hands new files to the kernel's
// uid. An unprivileged gateway reaches workspaces through the launcher
// service's id-mapped views, where what it creates already belongs to the
// kernel on disk (and it could not chown anyway).
bool needs_chown(std::uint32_t, std::uint32_t) noexcept;

void give_to_owner(int fd, std::uint32_t uid, std::uint32_t gid, std::string_view action,
                   std::string_view rel);

void write_all(int fd, std::string_view data, std::string_view action, std::string_view rel);

// Removes a name we just created after a later step failed, so a failed
// write does not leave a half-made file behind. Best effort: whatever the
// kernel put there meanwhile is its own.
void discard_created(int parent_fd, const std::string& name, bool directory) noexcept;

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

opened_file open_for_put(int root_fd, std::string_view path, bool append, std::uint32_t uid, std::uint32_t gid);

// Writes or appends to a regular file (see open_for_put).
entry_info put_file(int root_fd, std::string_view path, std::string_view data, bool append,
                    std::uint32_t uid, std::uint32_t gid);

std::string random_suffix();

void remove_children(int parent_fd, const std::string& name, const std::string& rel, int depth,
                     std::uint64_t& budget);

}  // namespace cellgate::contents::beneath
