#include "host_fs.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

// mountinfo escapes space, tab, newline and backslash as octal.
std::string unescape_mount_path(const std::string& s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size()) {
            const std::string oct = s.substr(i + 1, 3);
            if (oct.size() == 3 && std::all_of(oct.begin(), oct.end(),
                                               [](char c) { return c >= '0' && c <= '7'; })) {
                out.push_back(static_cast<char>(std::stoi(oct, nullptr, 8)));
                i += 3;
                continue;
            }
        }
        out.push_back(s[i]);
    }
    return out;
}

std::vector<std::string> all_mount_points() {
    std::ifstream in("/proc/self/mountinfo");
    std::vector<std::string> points;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string id, parent, devno, root, point;
        if (fields >> id >> parent >> devno >> root >> point)
            points.push_back(unescape_mount_path(point));
    }
    return points;
}

}  // namespace

bool is_mount_point(const fs::path& path) {
    const auto want = path.lexically_normal().string();
    const auto points = all_mount_points();
    return std::find(points.begin(), points.end(), want) != points.end();
}

std::vector<std::string> mounts_under(const fs::path& prefix) {
    const auto p = prefix.lexically_normal().string();
    std::vector<std::string> out;
    for (auto& m : all_mount_points())
        if (m == p || (m.size() > p.size() && m.compare(0, p.size(), p) == 0 && m[p.size()] == '/'))
            out.push_back(std::move(m));
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

void mount_tmpfs(const std::string& step, const fs::path& where, std::uint64_t bytes, unsigned mode) {
    char mode_text[8];
    std::snprintf(mode_text, sizeof mode_text, "%o", mode);
    const std::string options = "size=" + std::to_string(bytes) + ",mode=" + mode_text;
    if (::mount("tmpfs", where.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                options.c_str()) != 0)
        throw launch_error(step, "mount tmpfs on " + where.string(), errno);
}

void unmount(const std::string& step, const fs::path& where) {
    if (::umount2(where.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL &&
        errno != ENOENT)
        throw launch_error(step, "unmount " + where.string(), errno);
}

void make_dir(const std::string& step, const fs::path& path, unsigned mode, bool must_not_exist) {
    if (::mkdir(path.c_str(), mode) != 0) {
        if (errno != EEXIST || must_not_exist)
            throw launch_error(step, "mkdir " + path.string(), errno);
        struct stat st{};
        if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            throw launch_error(step, path.string() + " exists and is not a directory", ENOTDIR);
    }
    if (::chmod(path.c_str(), mode) != 0) throw launch_error(step, "chmod " + path.string(), errno);
}

void change_owner(const std::string& step, const fs::path& path, std::uint32_t uid,
                  std::uint32_t gid, unsigned mode, unsigned type) {
    const int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw launch_error(step, "open " + path.string(), errno);
    struct stat st{};
    std::string failed;
    int e = 0;
    if (::fstat(fd, &st) != 0) {
        failed = "stat";
        e = errno;
    } else if (S_ISLNK(st.st_mode) || (type != 0 && (st.st_mode & S_IFMT) != type)) {
        failed = S_ISLNK(st.st_mode) ? "refused a symlink at" : "refused a file of the wrong type at";
        e = S_ISLNK(st.st_mode) ? ELOOP : EINVAL;
    } else if (::fchownat(fd, "", uid, gid, AT_EMPTY_PATH) != 0) {
        failed = "chown";
        e = errno;
    } else {
        // No fchmod on an O_PATH descriptor before Linux 6.6; its /proc link
        // names this very inode, whatever the path now holds.
        const std::string self = "/proc/self/fd/" + std::to_string(fd);
        if (::chmod(self.c_str(), mode) != 0) {
            failed = "chmod";
            e = errno;
        }
    }
    ::close(fd);
    if (!failed.empty()) throw launch_error(step, failed + " " + path.string(), e);
}

void write_file(const std::string& step, const fs::path& path, const std::string& content,
                unsigned mode, std::uint32_t uid, std::uint32_t gid) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) throw launch_error(step, "create " + path.string(), errno);
    std::size_t done = 0;
    while (done < content.size()) {
        const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int e = errno;
            ::close(fd);
            throw launch_error(step, "write " + path.string(), e);
        }
        done += static_cast<std::size_t>(n);
    }
    const bool ok = ::fchown(fd, uid, gid) == 0 && ::fchmod(fd, mode) == 0;
    const int e = errno;
    ::close(fd);
    if (!ok) throw launch_error(step, "chown/chmod " + path.string(), e);
}

std::string read_file(const fs::path& path, std::size_t max_bytes) {
    std::ifstream in(path, std::ios::binary);
    std::string out(max_bytes, '\0');
    in.read(out.data(), static_cast<std::streamsize>(max_bytes));
    out.resize(static_cast<std::size_t>(in.gcount()));
    return out;
}

std::string name_hash(const std::string& text, int hex_digits) {
    std::uint64_t h = 1469598103934665603ull;
    for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    char out[17];
    std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
    return std::string(out).substr(16 - static_cast<std::size_t>(hex_digits));
}

std::string read_tail(const fs::path& path, std::size_t max_bytes) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return {};
    const auto size = static_cast<std::size_t>(in.tellg());
    const auto start = size > max_bytes ? size - max_bytes : 0;
    in.seekg(static_cast<std::streamoff>(start));
    std::string out(size - start, '\0');
    in.read(out.data(), static_cast<std::streamsize>(out.size()));
    return out;
}

void require_searchable_by_others(const std::string& step, const fs::path& path) {
    fs::path at = "/";
    const fs::path parent = path.parent_path();
    for (const auto& part : parent.relative_path()) {
        at /= part;
        struct stat st{};
        if (::stat(at.c_str(), &st) != 0) throw launch_error(step, "stat " + at.string(), errno);
        if (S_ISDIR(st.st_mode) && (st.st_mode & S_IXOTH) == 0) {
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
            throw launch_error(step, "gVisor's gofer cannot reach " + path.string() + ": " + at.string() +
                                         " (mode " + mode + ") is not searchable by other users; give it o+x",
                               EACCES);
        }
    }
}

int pidfd_open(std::int64_t pid) {
    return static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
}

unique_fd open_kernel_log(const std::string& step, const fs::path& run_dir) {
    unique_fd fd(::open((run_dir / "kernel.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd) throw launch_error(step, "open kernel.log", errno);
    return fd;
}

}  // namespace cellgate::launcher
