// cellgate-relay: the host half of a gVisor sandbox's kernel relay.
//   cellgate-relay --socket-dir DIR --lock FILE --pid-file FILE [--uid N --gid N] [--resumed 1]
// Descriptor 3 reads the sandbox's stdout, descriptor 4 writes its stdin;
// stdout and stderr are its log. It takes the lock, daemonises (the parent
// writes the child's pid and exits 0 once the child holds everything it
// needs), drops to --uid/--gid, and relays until the sandbox ends. Exit codes:
// 0 the sandbox ended, 1 bad use or setup, 3 the sandbox broke the protocol.
// The launcher starts it (see src/relay_process.hpp); it is not for people.
#include "relay/host_relay.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr int from_sandbox_fd = 3;
constexpr int to_sandbox_fd = 4;

void log_line(const std::string& line) {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    std::fprintf(stderr, "%s cellgate-relay[%d]: %s\n", stamp, static_cast<int>(::getpid()), line.c_str());
    std::fflush(stderr);
}

int fail(const std::string& what, int err = 0) {
    log_line(what + (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));
    return 1;
}

struct options {
    std::string socket_dir, lock, pid_file;
    std::optional<std::uint32_t> uid, gid;
    bool resumed = false;  // the sandbox was restored from a checkpoint
};

std::optional<options> parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) return std::nullopt;
        const std::string v = argv[++i];
        try {
            if (a == "--socket-dir") o.socket_dir = v;
            else if (a == "--lock") o.lock = v;
            else if (a == "--pid-file") o.pid_file = v;
            else if (a == "--uid") o.uid = static_cast<std::uint32_t>(std::stoul(v));
            else if (a == "--gid") o.gid = static_cast<std::uint32_t>(std::stoul(v));
            else if (a == "--resumed") o.resumed = v == "1";
            else return std::nullopt;
        } catch (...) {
            return std::nullopt;
        }
    }
    if (o.socket_dir.empty() || o.lock.empty() || o.pid_file.empty() || o.uid.has_value() != o.gid.has_value())
        return std::nullopt;
    return o;
}

bool is_pipe(int fd) {
    struct stat st{};
    return ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

// Host root is never needed after setup: the relay parses what a sandbox
// sends, so it does that as the sandbox's own host uid, with no capabilities
// and no way to gain any.
int drop_privileges(const options& o) {
    if (o.uid) {
        if (::setgroups(0, nullptr) != 0) return fail("setgroups", errno);
        if (::setresgid(*o.gid, *o.gid, *o.gid) != 0) return fail("setresgid", errno);
        if (::setresuid(*o.uid, *o.uid, *o.uid) != 0) return fail("setresuid", errno);
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs", errno);
    const rlimit files{256, 256};  // 64 clients, 5 listeners and a few of its own
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_NOFILE, &files);
    ::setrlimit(RLIMIT_CORE, &no_core);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const auto o = parse(argc, argv);
    if (!o) {
        std::fprintf(stderr,
                     "usage: cellgate-relay --socket-dir DIR --lock FILE --pid-file FILE [--uid N --gid N] [--resumed 1]\n"
                     "  (fd 3: the sandbox's stdout, fd 4: its stdin; started by the launcher)\n");
        return 1;
    }
    if (!is_pipe(from_sandbox_fd) || !is_pipe(to_sandbox_fd))
        return fail("descriptors 3 and 4 must be the sandbox's pipes");
    std::signal(SIGPIPE, SIG_IGN);
    ::umask(007);

    const int lock = ::open(o->lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (lock < 0) return fail("open " + o->lock, errno);
    if (::flock(lock, LOCK_EX | LOCK_NB) != 0) return fail("another relay holds " + o->lock, errno);
    for (const int fd : {from_sandbox_fd, to_sandbox_fd})
        ::fcntl(fd, F_SETPIPE_SZ, 1 << 20);  // fewer wake-ups for large outputs; best effort

    const pid_t child = ::fork();
    if (child < 0) return fail("fork", errno);
    if (child > 0) {
        // The parent reports the child's pid; the lock (shared by both until
        // the parent exits) stays with the child.
        const int fd = ::open(o->pid_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        const std::string text = std::to_string(child) + "\n";
        if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
            const int e = errno;
            ::kill(child, SIGKILL);
            return fail("write " + o->pid_file, e);
        }
        ::close(fd);
        return 0;
    }

    ::setsid();  // out of the launcher's session: its signals are not ours
    if (::chdir("/") != 0) return fail("chdir /", errno);
    if (drop_privileges(*o) != 0) return 1;

    cellgate::launcher::relay::host_relay_options ro;
    ro.socket_dir = o->socket_dir;
    ro.from_sandbox = from_sandbox_fd;
    ro.to_sandbox = to_sandbox_fd;
    ro.resumed = o->resumed;
    ro.log = log_line;
    log_line("relaying for " + o->socket_dir);
    const auto r = cellgate::launcher::relay::run_host_relay(ro);
    log_line("ended: " + r.reason);
    return r.protocol_error ? 3 : 0;
}
