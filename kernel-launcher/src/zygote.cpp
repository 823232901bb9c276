#include "zygote.hpp"

#include "cgroups.hpp"
#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/unique_fd.hpp"
#include "host_fs.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <sys/time.h>

namespace cellgate::launcher {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* zygote_script = "/opt/cellgate/cellgate-zygote";
constexpr int request_timeout_s = 20;

bool write_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
        const ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace

std::vector<seccomp_filter> read_seccomp_filters(std::int64_t target) {
    const auto pid = static_cast<pid_t>(target);
    // The tracer is a child of its own, so no other thread of this process
    // sees the tracee's stops (or has to wait for them). Everything it needs
    // is allocated before the fork.
    constexpr std::size_t capacity = 512 * 1024;
    std::vector<char> buffer(capacity);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw launch_error("zygote-seccomp", "pipe", errno);
    unique_fd read_end(p[0]), write_end(p[1]);
    const pid_t tracer = ::fork();
    if (tracer < 0) throw launch_error("zygote-seccomp", "fork", errno);
    if (tracer == 0) {
        // Record: u64 flags, u32 instructions, then the BPF, for each filter.
        if (::ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) != 0) ::_exit(10);
        if (::ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr) != 0) ::_exit(11);
        int status = 0;
        if (::waitpid(pid, &status, __WALL) != pid) ::_exit(12);
        std::size_t used = 0;
        int code = 0;
        for (unsigned long i = 0; i < 64; ++i) {
            const long n = ::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, reinterpret_cast<void*>(i), nullptr);
            if (n < 0) {
                if (errno != ENOENT) code = 13;
                break;
            }
            const std::size_t bytes = static_cast<std::size_t>(n) * 8;
            if (used + 12 + bytes > capacity) {
                code = 14;
                break;
            }
            __ptrace_seccomp_metadata meta{};
            meta.filter_off = i;
            if (::ptrace(PTRACE_SECCOMP_GET_METADATA, pid, reinterpret_cast<void*>(sizeof meta), &meta) < 0) {
                code = 15;
                break;
            }
            std::memcpy(buffer.data() + used, &meta.flags, 8);
            const auto count = static_cast<std::uint32_t>(n);
            std::memcpy(buffer.data() + used + 8, &count, 4);
            if (::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, reinterpret_cast<void*>(i), buffer.data() + used + 12) != n) {
                code = 16;
                break;
            }
            used += 12 + bytes;
        }
        ::ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
        if (code == 0 && !write_all(write_end.get(), buffer.data(), used)) code = 17;
        ::_exit(code);
    }
    write_end.reset();
    std::string out;
    for (;;) {
        const ssize_t n = ::read(read_end.get(), buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.append(buffer.data(), static_cast<std::size_t>(n));
    }
    int status = 0;
    while (::waitpid(tracer, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw launch_error("zygote-seccomp",
                           "reading the sandbox's seccomp filter failed (step " +
                               std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")",
                           EPERM);
    std::vector<seccomp_filter> filters;
    for (std::size_t at = 0; at + 12 <= out.size();) {
        seccomp_filter f;
        std::uint32_t count = 0;
        std::memcpy(&f.flags, out.data() + at, 8);
        std::memcpy(&count, out.data() + at + 8, 4);
        at += 12;
        if (at + count * 8ull > out.size()) break;
        f.bpf = out.substr(at, count * 8ull);
        at += count * 8ull;
        filters.push_back(std::move(f));
    }
    return filters;
}

struct zygotes::process {
    pid_t pid = -1;
    unique_fd channel;
    bool ready = false;
    bool dead = false;
    std::mutex request;  // one request at a time on the channel

    ~process() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
            }
        }
    }

    // A zygote that has ended, or whose channel broke, is not used again.
    void mark_dead() {
        dead = true;
        ready = false;
        if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == pid) pid = -1;
    }

    // Reads the zygote's "ready" if it has sent it, without waiting.
    void poll_ready() {
        if (ready || dead) return;
        pollfd p{channel.get(), POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0) return;
        char buf[512];
        const ssize_t n = ::recv(channel.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) {
            mark_dead();
            return;
        }
        try {
            ready = json::parse(std::string(buf, static_cast<std::size_t>(n))).value("ready", false);
        } catch (...) {
            mark_dead();
        }
        if (!ready) mark_dead();
    }
};

namespace {

// Writes to a file that exists (a cgroup's procs, a process's OOM score).
void write_existing(const fs::path& path, const std::string& text) {
    unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd || !write_all(fd.get(), text.data(), text.size()))
        throw launch_error("zygote-fork", "write " + path.string(), errno);
}

// Starts the image's zygote: a child of this process that, before it runs
// any of the image's code, has its own mount, network, IPC and UTS
// namespaces, sees only a read-only bind of the image (and a tmpfs /tmp),
// has no capability left and cannot gain one (SECBIT_NOROOT, an empty
// bounding set, no_new_privs). It keeps root's uid: as the owner of the
// sandboxes' user namespaces, that alone lets it join them.
pid_t spawn_zygote(const std::string& rootfs, int channel, int log_fd) {
    const std::string tmp = rootfs + "/tmp", dev = rootfs + "/dev", null = dev + "/null", urandom = dev + "/urandom";
    const char* const argv[] = {"/usr/bin/python3", "-s", zygote_script, nullptr};
    const char* const envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                "HOME=/tmp",
                                "LANG=C.UTF-8",
                                "PYTHONDONTWRITEBYTECODE=1",
                                "OPENBLAS_NUM_THREADS=1",
                                "OMP_NUM_THREADS=1",
                                "MKL_NUM_THREADS=1",
                                "IPYTHONDIR=/tmp/.ipython",
                                "MPLCONFIGDIR=/tmp/.mplconfig",
                                "MPLBACKEND=module://matplotlib_inline.backend_inline",
                                nullptr};
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) throw launch_error("zygote-start", "open /dev/null", errno);
    const pid_t pid = ::fork();
    if (pid < 0) {
        const int err = errno;
        ::close(null_fd);
        throw launch_error("zygote-start", "fork", err);
    }
    if (pid == 0) {
        // Only async-signal-safe calls from here: this process may have threads.
        sigset_t none;
        ::sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        if (::setsid() < 0) ::_exit(120);
        if (::unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0) ::_exit(121);
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(122);
        if (::mount(rootfs.c_str(), rootfs.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) ::_exit(123);
        if (::mount(nullptr, rootfs.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                    nullptr) != 0)
            ::_exit(124);
        if (::mount("tmpfs", tmp.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777") != 0) ::_exit(125);
        // /dev: only null and urandom (IPython opens /dev/null as it loads).
        if (::mount("tmpfs", dev.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755") != 0) ::_exit(132);
        for (const auto* node : {&null, &urandom}) {
            const int f = ::open(node->c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
            if (f < 0) ::_exit(133);
            ::close(f);
            const char* source = node == &null ? "/dev/null" : "/dev/urandom";
            if (::mount(source, node->c_str(), nullptr, MS_BIND, nullptr) != 0) ::_exit(134);
        }
        if (::chdir(rootfs.c_str()) != 0 || ::chroot(".") != 0 || ::chdir("/") != 0) ::_exit(126);
        if (::dup2(null_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0 || ::dup2(channel, 3) < 0)
            ::_exit(127);
        ::syscall(SYS_close_range, 4u, ~0u, 0u);
        const rlimit files{1024, 1u << 20};  // a kernel's own limit may be up to the launcher's maximum
        ::setrlimit(RLIMIT_NOFILE, &files);
        if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                                           SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
                    0, 0, 0) != 0)
            ::_exit(128);
        for (int cap = 0; cap < 64; ++cap)
            if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) ::_exit(129);
        if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(130);
        // With SECBIT_NOROOT the exec gives root's uid no capability.
        ::execve(argv[0], const_cast<char* const*>(argv), const_cast<char* const*>(envp));
        ::_exit(131);
    }
    ::close(null_fd);
    return pid;
}

}  // namespace

zygotes::zygotes(fs::path log_dir) : log_dir_(std::move(log_dir)) {}
zygotes::~zygotes() = default;

std::shared_ptr<zygotes::process> zygotes::find(const std::string& rootfs) {
    const std::lock_guard lock(mutex_);
    auto& slot = by_image_[rootfs];
    if (slot && slot->dead) slot.reset();
    if (!slot) {
        std::error_code ec;
        if (!fs::exists(fs::path(rootfs) / std::string(zygote_script).substr(1), ec)) {
            // An image without a zygote (an older build, another language).
            auto none = std::make_shared<process>();
            none->dead = true;
            return none;
        }
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
            throw launch_error("zygote-start", "socketpair", errno);
        unique_fd ours(sv[0]), theirs(sv[1]);
        fs::create_directories(log_dir_, ec);
        const auto log_path = log_dir_ / ("zygote-" + std::to_string(std::hash<std::string>{}(rootfs) & 0xffffffff) + ".log");
        unique_fd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (!log) throw launch_error("zygote-start", "open " + log_path.string(), errno);
        auto p = std::make_shared<process>();
        p->pid = spawn_zygote(rootfs, theirs.get(), log.get());
        const timeval timeout{request_timeout_s, 0};
        ::setsockopt(ours.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        ::setsockopt(ours.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
        p->channel = std::move(ours);
        slot = std::move(p);
    }
    return slot;
}

bool zygotes::ready(const std::string& rootfs) {
    const auto p = find(rootfs);
    const std::lock_guard lock(p->request);
    p->poll_ready();
    return p->ready;
}

std::int64_t zygotes::fork_kernel(const std::string& rootfs, const zygote_fork& f) {
    if (f.seccomp.empty()) throw launch_error("zygote-fork", "no seccomp filter for the kernel", EINVAL);
    const auto p = find(rootfs);
    const std::lock_guard lock(p->request);
    p->poll_ready();
    if (!p->ready) throw launch_error("zygote-fork", "the image's zygote is not ready", EAGAIN);

    // The init's namespaces, held by descriptor: pidfd first, then the
    // files, then a check that the pidfd's process is still there, so they
    // are its and not a recycled pid's.
    unique_fd init(pidfd_open(f.init_pid));
    if (!init) throw launch_error("zygote-fork", "the sandbox's init is gone", errno);
    std::vector<unique_fd> held;
    for (const char* ns : {"user", "ipc", "uts", "net", "cgroup", "pid", "mnt"}) {
        const auto path = "/proc/" + std::to_string(f.init_pid) + "/ns/" + ns;
        unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) throw launch_error("zygote-fork", "open " + path, errno);
        held.push_back(std::move(fd));
    }
    pollfd alive{init.get(), POLLIN, 0};
    if (::poll(&alive, 1, 0) != 0) throw launch_error("zygote-fork", "the sandbox's init is gone", ESRCH);
    int go[2];
    if (::pipe2(go, O_CLOEXEC) != 0) throw launch_error("zygote-fork", "pipe", errno);
    unique_fd go_read(go[0]), go_write(go[1]);

    // A JSON line, then the filters' BPF, raw, one after the other.
    json req = {{"uid", f.uid}, {"gid", f.gid}, {"nofile", f.nofile}, {"fsize", f.fsize}};
    req["seccomp"] = json::array();
    std::string programs;
    for (const auto& s : f.seccomp) {
        req["seccomp"].push_back({{"bytes", s.bpf.size()}, {"flags", s.flags}});
        programs += s.bpf;
    }
    const std::string body = req.dump() + "\n" + programs;

    std::vector<int> fds = {go_read.get(), f.log_fd};
    for (const auto& h : held) fds.push_back(h.get());
    fds.push_back(init.get());
    std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
    iovec iov{const_cast<char*>(body.data()), body.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    if (::sendmsg(p->channel.get(), &msg, MSG_NOSIGNAL) < 0) {
        const int err = errno;
        p->mark_dead();
        throw launch_error("zygote-fork", "the zygote does not listen", err);
    }
    go_read.reset();
    char buf[4096];
    const ssize_t n = ::recv(p->channel.get(), buf, sizeof buf, 0);
    if (n <= 0) {
        const int err = n < 0 ? errno : EPIPE;
        p->mark_dead();
        throw launch_error("zygote-fork", "the zygote did not answer", err);
    }
    json answer;
    try {
        answer = json::parse(std::string(buf, static_cast<std::size_t>(n)));
    } catch (...) {
        p->mark_dead();
        throw launch_error("zygote-fork", "the zygote's answer is not JSON", EPROTO);
    }
    if (!answer.contains("pid") || !answer["pid"].is_number_integer())
        throw launch_error("zygote-fork", "the zygote refused: " + answer.value("error", answer.dump()), EINVAL);
    const auto pid = answer["pid"].get<std::int64_t>();

    // The supervisor waits for "g" (its parent never reaps it before: it
    // cannot end until then, so the pid is its own). Into the sandbox's
    // cgroups, with the OOM score of a sandboxed process, then on its way.
    for (const auto& dir : cgroup_dirs(f.cgroups_path)) {
        write_existing(fs::path(dir) / "cgroup.procs", std::to_string(pid));
    }
    write_existing("/proc/" + std::to_string(pid) + "/oom_score_adj", std::to_string(f.oom_score_adj));
    if (!write_all(go_write.get(), "g", 1)) throw launch_error("zygote-fork", "the supervisor ended", errno);
    return pid;
}

}  // namespace cellgate::launcher
