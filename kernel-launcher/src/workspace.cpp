#include "workspace.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "command.hpp"
#include "host_fs.hpp"

#include <fcntl.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string_view>
#include <vector>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

constexpr const char* step = "prepare-workspace";

// Serialises workspace changes between threads and processes (gateway and CLI).
class root_lock {
public:
    explicit root_lock(const fs::path& root) {
        fd_ = ::open((root / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd_ < 0) throw launch_error(step, "open " + (root / ".lock").string(), errno);
        while (::flock(fd_, LOCK_EX) != 0)
            if (errno != EINTR) throw launch_error(step, "lock workspace root", errno);
    }
    ~root_lock() { ::close(fd_); }
    root_lock(const root_lock&) = delete;
    root_lock& operator=(const root_lock&) = delete;

private:
    int fd_ = -1;
};

fs::path image_of(const fs::path& dir) { return fs::path(dir.string() + ".img"); }

// A copy that shares the source's blocks where the file system can (XFS,
// btrfs), else one that writes only the blocks in use.
image_copy copy_image_file(const fs::path& from, const fs::path& to) {
    image_copy out;
    auto r = run_command({"cp", "--reflink=always", "--", from.string(), to.string()}, std::chrono::minutes(10));
    out.reflinked = r.exit_code == 0;
    if (!out.reflinked) {
        ::unlink(to.c_str());
        r = run_command({"cp", "--sparse=always", "--", from.string(), to.string()}, std::chrono::minutes(10));
        if (r.exit_code != 0) {
            ::unlink(to.c_str());
            throw launch_error(step, "copying " + from.string() + " failed: " + r.output, EIO);
        }
    }
    ::chmod(to.c_str(), 0600);
    struct stat st{};
    if (::stat(to.c_str(), &st) == 0) {
        out.bytes = static_cast<std::uint64_t>(st.st_size);
        out.disk_bytes = out.reflinked ? 0 : static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
    return out;
}

// Moves every owner in [from, from + 65536) to the same offset from `to`,
// without following a link: a seeded workspace's files become its own
// slot's. Every change is made relative to a directory descriptor opened
// without following a link (fchownat, openat O_NOFOLLOW), never by path, so
// a directory swapped for a symlink meanwhile cannot redirect a change
// outside the tree (security review turn 3, L5). Other file systems mounted
// inside are not entered.
constexpr int max_remap_depth = 512;

std::uint32_t remapped(std::uint32_t id, std::uint32_t from, std::uint32_t to) {
    return id - from < 65536u ? to + (id - from) : id;
}

void remap_dir(int dir_fd, dev_t dev, std::uint32_t from, std::uint32_t to, int depth) {
    if (depth > max_remap_depth) throw launch_error(step, "a tree nested more than 512 directories deep", ELOOP);
    const int listing = ::dup(dir_fd);
    if (listing < 0) throw launch_error(step, "dup", errno);
    DIR* d = ::fdopendir(listing);
    if (d == nullptr) {
        const int e = errno;
        ::close(listing);
        throw launch_error(step, "fdopendir", e);
    }
    const std::unique_ptr<DIR, int (*)(DIR*)> guard(d, ::closedir);
    for (errno = 0; const dirent* entry = ::readdir(d); errno = 0) {
        const std::string_view name = entry->d_name;
        if (name == "." || name == "..") continue;
        struct stat st {};
        if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
        const auto uid = remapped(st.st_uid, from, to), gid = remapped(st.st_gid, from, to);
        if ((uid != st.st_uid || gid != st.st_gid) &&
            ::fchownat(dir_fd, entry->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0 && errno != ENOENT)
            throw launch_error(step, "changing the owner of " + std::string(name), errno);
        if (!S_ISDIR(st.st_mode) || st.st_dev != dev) continue;
        const unique_fd sub(::openat(dir_fd, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub) continue;  // replaced by a link or a file meanwhile: not followed
        remap_dir(sub.get(), dev, from, to, depth + 1);
    }
    if (errno != 0) throw launch_error(step, "reading a directory", errno);
}

}  // namespace

void remap_owners(const fs::path& dir, std::uint32_t from, std::uint32_t to) {
    if (from == to) return;
    const unique_fd owned(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!owned) throw launch_error(step, "opening " + dir.string() + " to move its files to their new owners", errno);
    const int fd = owned.get();
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw launch_error(step, "stat " + dir.string(), errno);
    const auto uid = remapped(st.st_uid, from, to), gid = remapped(st.st_gid, from, to);
    if ((uid != st.st_uid || gid != st.st_gid) && ::fchown(fd, uid, gid) != 0)
        throw launch_error(step, "changing the owner of " + dir.string(), errno);
    remap_dir(fd, st.st_dev, from, to, 0);
}

void copy_image_workspace(const fs::path& from, const fs::path& to, std::uint32_t host_id_base) {
    std::error_code ec;
    std::vector<std::string> argv = {"cp", "-a", "--no-dereference", "-t", to.string(), "--"};
    for (auto it = fs::directory_iterator(from, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        if (argv.size() > 4096 + 6) throw launch_error(step, "the image's /workspace has more than 4096 entries at its top");
        argv.push_back(it->path().string());
    }
    if (argv.size() == 6) return;  // nothing there (every built-in image)
    const auto copied = run_command(argv, std::chrono::seconds(120));
    if (copied.exit_code != 0)
        throw launch_error(step, "copying the template's /workspace into the session's" +
                                     std::string(copied.timed_out ? ": timed out" : ": " + copied.output.substr(0, 1000)));
    remap_owners(to, 0, host_id_base);
}

void make_ext4_image(const fs::path& image, std::uint64_t bytes, std::uint32_t owner_uid, std::uint32_t owner_gid,
                     const std::string& label) {
    const int fd = ::open(image.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) throw launch_error(step, "create " + image.string(), errno);
    const bool sized = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    const int e = errno;
    ::close(fd);
    if (!sized) {
        ::unlink(image.c_str());
        throw launch_error(step, "size " + image.string(), e);
    }
    const auto mkfs = run_command(
        {"mkfs.ext4", "-q", "-F", "-m", "0", "-L", label, "-E",
         "root_owner=" + std::to_string(owner_uid) + ":" + std::to_string(owner_gid) +
             ",lazy_itable_init=1,lazy_journal_init=1,nodiscard",
         image.string()},
        std::chrono::seconds(60));
    if (mkfs.exit_code != 0) {
        ::unlink(image.c_str());
        throw launch_error(step, "mkfs.ext4 failed: " + mkfs.output);
    }
}

void mount_ext4_image(const fs::path& image, const fs::path& dir) {
    const auto mounted = run_command(
        {"mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", image.string(), dir.string()},
        std::chrono::seconds(30));
    if (mounted.exit_code != 0) throw launch_error(step, "mount " + image.string() + ": " + mounted.output);
}

workspace_store::workspace_store(fs::path root, std::uint32_t id_base, std::uint32_t max_slots)
    : root_(std::move(root)), id_base_(id_base), max_slots_(max_slots) {}

std::uint32_t workspace_store::claim_slot(const std::string& name) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(slots_dir(), ec))
        if (read_file(entry.path(), 256) == name)
            return static_cast<std::uint32_t>(std::stoul(entry.path().filename().string()));
    for (std::uint32_t slot = 0; slot < max_slots_; ++slot) {
        const auto path = slots_dir() / std::to_string(slot);
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            throw launch_error(step, "claim uid slot " + path.string(), errno);
        }
        const bool ok = ::write(fd, name.data(), name.size()) == static_cast<ssize_t>(name.size());
        ::close(fd);
        if (!ok) throw launch_error(step, "record uid slot " + path.string(), EIO);
        return slot;
    }
    throw launch_error(step, "all " + std::to_string(max_slots_) + " workspace uid slots are taken",
                       ENOSPC);
}

workspace workspace_store::ensure(const fs::path& dir, std::uint64_t bytes, std::uint32_t uid,
                                  std::uint32_t gid, const workspace_seed* seed) {
    std::error_code ec;
    fs::create_directories(root_.parent_path(), ec);
    make_dir(step, root_, 0711);
    make_dir(step, slots_dir(), 0700);
    root_lock lock(root_);

    workspace ws;
    ws.dir = dir;
    const std::string name = dir.filename().string();
    ws.host_id_base = id_base_ + claim_slot(name) * 65536u;
    if (is_mount_point(dir)) return ws;

    const fs::path image = image_of(dir);
    const std::uint32_t owner_uid = ws.host_id_base + uid;
    const std::uint32_t owner_gid = ws.host_id_base + gid;
    struct stat st{};
    if (::lstat(image.c_str(), &st) != 0 && seed != nullptr) {
        ws.created = true;
        copy_image_file(seed->image, image);
    } else if (::lstat(image.c_str(), &st) != 0) {
        ws.created = true;
        make_ext4_image(image, bytes, owner_uid, owner_gid, "workspace");
    } else if (!S_ISREG(st.st_mode)) {
        throw launch_error(step, image.string() + " is not a regular file", EINVAL);
    }

    make_dir(step, dir, 0700);
    try {
        mount_ext4_image(image, dir);
    } catch (...) {
        if (ws.created) ::unlink(image.c_str());
        ::rmdir(dir.c_str());
        throw;
    }
    if (ws.created) ::rmdir((dir / "lost+found").c_str());
    if (ws.created && seed != nullptr) {
        try {
            remap_owners(dir, seed->host_id_base, ws.host_id_base);
        } catch (...) {
            unmount(step, dir);
            ::rmdir(dir.c_str());
            ::unlink(image.c_str());
            throw;
        }
    }
    change_owner(step, dir, owner_uid, owner_gid, 0700);
    return ws;
}

image_copy workspace_store::copy_image(const fs::path& dir, const fs::path& to) {
    // Not under the root lock: a long copy must not hold up every start. The
    // caller keeps the workspace's owner from removing it meanwhile.
    const fs::path image = image_of(dir);
    struct stat st{};
    if (::lstat(image.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw launch_error(step, "the workspace " + dir.string() + " has no image", ENOENT);
    const bool mounted = is_mount_point(dir);
    // Frozen, its journal is flushed to the image and nothing changes it
    // until the copy is done; a sandbox's writes wait meanwhile.
    if (mounted) {
        const auto frozen = run_command({"fsfreeze", "--freeze", dir.string()}, std::chrono::seconds(60));
        if (frozen.exit_code != 0) throw launch_error(step, "fsfreeze " + dir.string() + ": " + frozen.output, EIO);
    }
    struct thaw {
        bool on;
        fs::path dir;
        ~thaw() {
            if (on) run_command({"fsfreeze", "--unfreeze", dir.string()}, std::chrono::seconds(60));
        }
    } thawer{mounted, dir};
    return copy_image_file(image, to);
}

std::uint32_t workspace_store::host_id_base(const fs::path& dir) {
    make_dir(step, root_, 0711);
    make_dir(step, slots_dir(), 0700);
    root_lock lock(root_);
    return id_base_ + claim_slot(dir.filename().string()) * 65536u;
}

void workspace_store::remove(const fs::path& dir) {
    std::error_code ec;
    if (!fs::exists(root_, ec)) return;
    root_lock lock(root_);
    for (const auto& m : mounts_under(dir)) unmount("remove-workspace", m);
    ::rmdir(dir.c_str());
    ::unlink(image_of(dir).c_str());
    const std::string name = dir.filename().string();
    for (const auto& entry : fs::directory_iterator(slots_dir(), ec))
        if (read_file(entry.path(), 256) == name) fs::remove(entry.path(), ec);
}

int workspace_store::reap_slots() {
    std::error_code ec;
    if (!fs::exists(slots_dir(), ec)) return 0;
    root_lock lock(root_);
    int freed = 0;
    for (const auto& entry : fs::directory_iterator(slots_dir(), ec)) {
        const auto name = read_file(entry.path(), 256);
        if (name.empty() || (!fs::exists(root_ / name, ec) && !fs::exists(image_of(root_ / name), ec))) {
            fs::remove(entry.path(), ec);
            ++freed;
        }
    }
    return freed;
}

}  // namespace cellgate::launcher
