#include "workspace.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "command.hpp"
#include "host_fs.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

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

}  // namespace

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
                                  std::uint32_t gid) {
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
    if (::lstat(image.c_str(), &st) != 0) {
        ws.created = true;
        const int fd = ::open(image.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) throw launch_error(step, "create " + image.string(), errno);
        const bool sized = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
        const int e = errno;
        ::close(fd);
        if (!sized) throw launch_error(step, "size " + image.string(), e);
        const auto mkfs = run_command(
            {"mkfs.ext4", "-q", "-F", "-m", "0", "-L", "workspace", "-E",
             "root_owner=" + std::to_string(owner_uid) + ":" + std::to_string(owner_gid) +
                 ",lazy_itable_init=1,lazy_journal_init=1,nodiscard",
             image.string()},
            std::chrono::seconds(60));
        if (mkfs.exit_code != 0) {
            ::unlink(image.c_str());
            throw launch_error(step, "mkfs.ext4 failed: " + mkfs.output);
        }
    } else if (!S_ISREG(st.st_mode)) {
        throw launch_error(step, image.string() + " is not a regular file", EINVAL);
    }

    make_dir(step, dir, 0700);
    const auto mounted = run_command(
        {"mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noexec,noatime", image.string(), dir.string()},
        std::chrono::seconds(30));
    if (mounted.exit_code != 0) {
        if (ws.created) ::unlink(image.c_str());
        ::rmdir(dir.c_str());
        throw launch_error(step, "mount " + image.string() + ": " + mounted.output);
    }
    if (ws.created) ::rmdir((dir / "lost+found").c_str());
    change_owner(step, dir, owner_uid, owner_gid, 0700);
    return ws;
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
