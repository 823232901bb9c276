#include "workspace_view.hpp"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

namespace cellgate::launcher::service {

namespace {

[[noreturn]] void fail(const std::string& what, int error = errno) {
    throw std::system_error(error, std::generic_category(), "workspace view: " + what);
}

struct fd_guard {
    int fd = -1;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

void write_file(const std::string& path, const std::string& text) {
    fd_guard f{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
    if (f.fd < 0) fail("open " + path);
    if (::write(f.fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) fail("write " + path);
}

// A user namespace whose only mapping is kernel id → client id, held by a
// short-lived child (a namespace lives as long as something refers to it;
// the returned fd is that reference).
int mapping_namespace(uid_t kernel_uid, gid_t kernel_gid, uid_t client_uid, gid_t client_gid) {
    int ready[2], go[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) fail("pipe");
    if (::pipe2(go, O_CLOEXEC) != 0) {
        ::close(ready[0]);
        ::close(ready[1]);
        fail("pipe");
    }
    const pid_t pid = ::fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {  // async-signal-safe calls only
        ::close(ready[0]);
        ::close(go[1]);
        char ok = ::unshare(CLONE_NEWUSER) == 0 ? 1 : 0;
        (void)!::write(ready[1], &ok, 1);
        (void)!::read(go[0], &ok, 1);
        ::_exit(0);
    }
    ::close(ready[1]);
    ::close(go[0]);
    fd_guard ready_r{ready[0]}, go_w{go[1]};
    struct reaper {
        pid_t pid;
        fd_guard& go;
        ~reaper() {
            ::close(go.fd);
            go.fd = -1;
            int status = 0;
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
        }
    } reap{pid, go_w};
    char ok = 0;
    if (::read(ready_r.fd, &ok, 1) != 1 || ok != 1) fail("unshare(CLONE_NEWUSER) failed in the helper", EPERM);
    const std::string proc = "/proc/" + std::to_string(pid);
    write_file(proc + "/uid_map", std::to_string(kernel_uid) + " " + std::to_string(client_uid) + " 1\n");
    write_file(proc + "/gid_map", std::to_string(kernel_gid) + " " + std::to_string(client_gid) + " 1\n");
    const int ns = ::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) fail("open the user namespace");
    return ns;
}

}  // namespace

void make_workspace_view(const std::filesystem::path& workspace, const std::filesystem::path& view, uid_t kernel_uid,
                         gid_t kernel_gid, uid_t client_uid, gid_t client_gid) {
    fd_guard ns{mapping_namespace(kernel_uid, kernel_gid, client_uid, client_gid)};
    fd_guard tree{static_cast<int>(
        ::syscall(SYS_open_tree, AT_FDCWD, workspace.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC))};
    if (tree.fd < 0) fail("open_tree " + workspace.string());
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    attr.userns_fd = static_cast<__u64>(ns.fd);
    if (::syscall(SYS_mount_setattr, tree.fd, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        fail("mount_setattr (id mapping) on " + workspace.string());
    if (::mkdir(view.c_str(), 0700) != 0 && errno != EEXIST) fail("mkdir " + view.string());
    if (::syscall(SYS_move_mount, tree.fd, "", AT_FDCWD, view.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        const int error = errno;
        ::rmdir(view.c_str());
        fail("move_mount to " + view.string(), error);
    }
}

void remove_workspace_view(const std::filesystem::path& view) noexcept {
    constexpr int mnt_detach = 2;  // MNT_DETACH; <sys/mount.h> clashes with <linux/mount.h> on glibc 2.36
    while (::syscall(SYS_umount2, view.c_str(), mnt_detach) == 0) {
    }
    ::rmdir(view.c_str());
}

}  // namespace cellgate::launcher::service
