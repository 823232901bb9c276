#include "contents/contents_store.hpp"

#include "contents/beneath.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <limits>
#include <memory>
#include <system_error>
#include <utility>

// Why this is safe against a hostile kernel that owns the workspace:
// contents/beneath.hpp.

namespace cellgate::contents {

using namespace beneath;

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
        // One more name is enough to know the budget is short: it is not
        // stat'ed. Hidden names count too, so no listing reads a directory
        // past its budget (security review turn 3, L1).
        if (out.entries.size() + out.hidden >= max_entries) {
            out.truncated = true;
            break;
        }
        // Such a name cannot be put in a JSON model; hiding it beats failing
        // the whole listing.
        if (!is_valid_utf8(name)) {
            ++out.hidden;
            continue;
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

int contents_store::open_directory_path(std::string_view path) const {
    const std::string rel = check_path(path);
    return open_dir_path(root_fd_, rel, "watch", rel).release();
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
