#pragma once

// Safe file access inside one kernel's workspace, for /api/contents, /files
// and the agent API. A sandboxed kernel owns its workspace and may have
// planted symlinks, FIFOs, device-looking names or huge files in it; every
// access here resolves paths with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
// | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) relative to an O_PATH descriptor
// of the workspace root, so nothing outside the workspace is ever read or
// written, whatever the path or the links in it. Relative paths only: ""
// is the root; "a/b.txt" a file; a leading "/", "..", "." components, empty
// components, NUL and backslashes are refused before any syscall.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::contents {

// What went wrong, mapped by the HTTP layer to a status code.
enum class error_kind {
    bad_path,       // 400: the path itself is malformed
    not_found,      // 404
    conflict,       // 409: exists already / not empty / wrong type
    too_large,      // 413: over the caller's read or write cap
    no_space,       // 507: the workspace is full (ENOSPC/EDQUOT/EFBIG)
    forbidden,      // 403: a symlink or special file in the way, or escaping
    io,             // 500
};

class contents_error : public std::runtime_error {
public:
    contents_error(error_kind kind, const std::string& message)
        : std::runtime_error(message), kind_(kind) {}
    error_kind kind() const noexcept { return kind_; }

private:
    error_kind kind_;
};

enum class entry_type { file, directory };

struct entry_info {
    std::string name;          // last path component ("" for the root)
    std::string path;          // relative path from the workspace root
    entry_type type = entry_type::file;
    std::uint64_t size = 0;
    std::int64_t mtime_ns = 0; // last modification, ns since the epoch
    std::int64_t ctime_ns = 0; // status change (used as "created")
    bool writable = true;
};

// One directory's entries, at most the caller's budget of them.
struct listing {
    std::vector<entry_info> entries;
    bool truncated = false;  // the directory held more than the budget
    std::size_t hidden = 0;  // names read but not listed (not UTF-8), within the budget
};

class contents_store {
public:
    // `root` is a host directory (the workspace mount). Files and directories
    // created here are chowned to owner_uid/owner_gid (the kernel's host ids)
    // so the kernel can change them.
    contents_store(std::string root, std::uint32_t owner_uid, std::uint32_t owner_gid);
    ~contents_store();
    contents_store(const contents_store&) = delete;
    contents_store& operator=(const contents_store&) = delete;

    // Validates and normalises a relative path ("a//b/" → refused; "a/b" ok,
    // "" ok). Throws contents_error(bad_path).
    static std::string check_path(std::string_view relative);

    entry_info stat(std::string_view path) const;        // not_found if absent
    bool exists(std::string_view path) const;
    // Entries of a directory, sorted by name; symlinks and special files are
    // listed with type file and writable=false but never followed. A kernel
    // can make millions of names for free (hard links), so at most
    // `max_entries` are read and stat'ed, in directory order (which ones is
    // then arbitrary), and `truncated` says that more were there.
    listing list(std::string_view dir, std::size_t max_entries) const;

    // Reads a regular file (not a symlink, FIFO or device); too_large past max_bytes.
    std::string read(std::string_view path, std::uint64_t max_bytes) const;
    // Creates or truncates and writes a regular file; parent dirs must exist.
    entry_info write(std::string_view path, std::string_view data);
    // Appends (for chunked uploads); creates the file if absent.
    entry_info append(std::string_view path, std::string_view data);
    // Creates a directory (conflict if something exists there).
    entry_info make_dir(std::string_view path);
    // Creates missing parents of `path` (like mkdir -p for its directory).
    void make_parents(std::string_view path);
    // Removes a file, or a directory (recursively when `recursive`, else it must be empty).
    void remove(std::string_view path, bool recursive = false);
    // Renames within the workspace; conflict when `to` exists, unless
    // `replace`, which replaces a file there (or whatever name the kernel put
    // there, never following it) atomically; a directory at `to` is a conflict.
    entry_info rename(std::string_view from, std::string_view to, bool replace = false);
    // Copies a regular file; conflict when `to` exists.
    entry_info copy(std::string_view from, std::string_view to);

    // For streamed uploads: creates (or truncates) a regular file the same way
    // write() does and returns an fd the caller owns (O_WRONLY|O_CLOEXEC).
    int open_for_write(std::string_view path, bool& created);

    // For uploads that must not harm the file they replace: creates a fresh
    // hidden file beside `path` (its parent must exist) and returns an fd
    // the caller owns; `temp_out` is its relative path, to rename() over
    // `path` with replace once complete, or to remove() after a failure.
    // Refuses like write() when something other than a regular file is at `path`.
    int open_temp_beside(std::string_view path, std::string& temp_out);

    // Streams a regular file: opens it safely and returns an fd the caller
    // owns (O_RDONLY|O_CLOEXEC), with its size. Throws like read().
    int open_for_read(std::string_view path, std::uint64_t& size_out) const;

    // For watching a directory (inotify through /proc/self/fd/N): an O_PATH
    // descriptor of the directory at `path`, resolved like every other call
    // (never through a symlink); the caller owns it. Not found, or not a
    // directory: throws.
    int open_directory_path(std::string_view path) const;

    // A fresh "Untitled", "Untitled1", … (with `ext`, e.g. ".txt") name in `dir`.
    std::string untitled_name(std::string_view dir, std::string_view base, std::string_view ext) const;

private:
    int root_fd_ = -1;
    std::uint32_t uid_, gid_;
};

// MIME type from a file name's extension ("application/octet-stream" if unknown).
std::string_view mime_type_for(std::string_view name) noexcept;

}  // namespace cellgate::contents
