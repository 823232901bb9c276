// cellgate-exec-shim against stand-in runtimes: shell commands that start a
// detached process the way `runc exec --detach` (the process itself is left
// to the shim) and `runsc exec --detach` (a waiter that exits 128 + n) do. No
// root and no sandbox; real processes, so the waits are on their exits.
#include "cellgate/launcher/exec_spec.hpp"
#include "../test_paths.hpp"
#include "cellgate/launcher/launch_error.hpp"
#include "exec_shim.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace cellgate::launcher;
namespace fs = std::filesystem;

namespace {

class exec_shim : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("cellgate-exec-shim-" + std::to_string(::getpid()) + "-" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string path(const char* name) const { return (dir_ / name).string(); }

    // As runc: `body` runs detached (its pid in exec.pid, also in child.pid
    // for the test), and its parent exits, leaving it to the shim. Its
    // parent is `setsid --fork`'s, which exits without waiting for anything:
    // a shell parent reaps a child that ends before the shell does (dash
    // does on SIGCHLD), which the runtimes never do.
    shim_request like_runc(const std::string& body) const {
        shim_request r;
        const auto record = "echo $$ > " + path("child.pid") + "; echo $$ > " + path("exec.pid") + "; exec /bin/sh -c \"$0\"";
        r.command.start = {"/bin/sh", "-c",
                           "rm -f " + path("exec.pid") + "; setsid --fork /bin/sh -c \"$0\" \"$1\"; while [ ! -s " +
                               path("exec.pid") + " ]; do sleep 0.01; done",
                           record, body};
        r.command.pid_file = path("exec.pid");
        r.command.log = path("runtime.log");
        r.start_timeout = std::chrono::seconds(10);
        return r;
    }

    // As runsc: a waiter whose "process" is its child; the waiter exits with
    // the child's code or 128 + n, and signals go through a command.
    shim_request like_runsc(const std::string& body) const {
        shim_request r;
        // Like runsc, the waiter writes the inner pid before its own, and the
        // start returns once its own is there.
        const auto waiter = "/bin/sh -c \"$0\" & echo $! > " + path("exec.internal-pid") + "; echo $$ > " +
                            path("exec.pid") + "; wait $!";
        r.command.start = {"/bin/sh", "-c",
                           "rm -f " + path("exec.pid") + "; setsid --fork /bin/sh -c \"$0\" \"$1\"; while [ ! -s " + path("exec.pid") +
                               " ]; do sleep 0.01; done",
                           waiter, body};
        r.command.pid_file = path("exec.pid");
        r.command.internal_pid_file = path("exec.internal-pid");
        r.command.signal_command = {"/bin/sh", "-c", "kill -$0 $1", "{signal}", "{pid}"};
        r.command.status_is_exit_code = true;
        r.command.log = path("runtime.log");
        r.start_timeout = std::chrono::seconds(10);
        return r;
    }

    struct pipes {
        int fds[2] = {-1, -1};
        pipes() { EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0); }
        ~pipes() {
            for (const int fd : fds)
                if (fd >= 0) ::close(fd);
        }
    };

    // Starts the shim with stdin, stdout and stderr pipes.
    exec_process start(const shim_request& r) {
        pipes in, out, err;
        exec_process::stdio ours;
        ours.stdin_ = unique_fd(std::exchange(in.fds[1], -1));
        ours.stdout_ = unique_fd(std::exchange(out.fds[0], -1));
        ours.stderr_ = unique_fd(std::exchange(err.fds[0], -1));
        shim_stdio theirs{in.fds[0], out.fds[1], err.fds[1]};
        return start_exec_shim(cellgate::fixtures::exec_shim, r, theirs, std::move(ours), -1, 24, 80).process;
    }

    static std::string read_all(int fd) {
        std::string out;
        char buf[4096];
        for (;;) {
            const auto n = ::read(fd, buf, sizeof buf);
            if (n <= 0) return out;
            out.append(buf, static_cast<std::size_t>(n));
        }
    }

    pid_t child_pid() const {
        long pid = 0;
        std::ifstream(path("child.pid")) >> pid;
        return static_cast<pid_t>(pid);
    }

    static bool gone_within(pid_t pid, std::chrono::seconds limit) {
        const auto end = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < end) {
            if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return false;
    }

    fs::path dir_;
};

constexpr auto limit = std::chrono::seconds(20);

}  // namespace

TEST_F(exec_shim, output_and_the_exact_exit_code_of_a_detached_process) {
    auto p = start(like_runc("read line; echo \"got $line\"; echo err >&2; exit 7"));
    ASSERT_GE(p.stdin_fd(), 0);
    ASSERT_EQ(::write(p.stdin_fd(), "input\n", 6), 6);
    p.take_stdin();
    EXPECT_EQ(read_all(p.stdout_fd()), "got input\n");
    EXPECT_EQ(read_all(p.stderr_fd()), "err\n");
    EXPECT_EQ(p.wait(limit), (exec_exit{7, 0}));
    EXPECT_EQ(p.exit_status(), (exec_exit{7, 0}));  // asked again, the same answer
}

TEST_F(exec_shim, a_signal_through_the_handle_ends_it_and_is_reported) {
    auto p = start(like_runc("exec sleep 60"));
    EXPECT_FALSE(p.exit_status());
    p.signal(SIGTERM);
    EXPECT_EQ(p.wait(limit), (exec_exit{128 + SIGTERM, SIGTERM}));
    EXPECT_THROW(p.signal(SIGSTOP), spec_error);
    EXPECT_NO_THROW(p.signal(SIGKILL));  // after the end: nothing to do, no error
}

TEST_F(exec_shim, an_exit_with_128_plus_n_is_an_exit_under_runc) {
    auto p = start(like_runc("exit 143"));
    EXPECT_EQ(p.wait(limit), (exec_exit{143, 0}));
}

TEST_F(exec_shim, dropping_the_handle_kills_the_process) {
    pid_t pid = 0;
    {
        auto p = start(like_runc("exec sleep 60"));
        pid = child_pid();
        ASSERT_GT(pid, 1);
        EXPECT_EQ(::kill(pid, 0), 0);
    }
    EXPECT_TRUE(gone_within(pid, limit));
}

TEST_F(exec_shim, a_failed_start_says_why_and_leaves_nothing) {
    shim_request r = like_runc("true");
    r.command.start = {"/bin/sh", "-c", "echo 'no such binary' > " + path("runtime.log") + "; exit 4"};
    try {
        start(r);
        ADD_FAILURE() << "a failed start was taken for a running process";
    } catch (const launch_error& e) {
        EXPECT_EQ(e.step(), "exec-start");
        EXPECT_NE(std::string(e.what()).find("exited 4: no such binary"), std::string::npos) << e.what();
    }
}

TEST_F(exec_shim, a_waiters_code_is_a_signal_only_when_the_handle_sent_it) {
    auto quiet = start(like_runsc("exit 143"));
    EXPECT_EQ(quiet.wait(limit), (exec_exit{143, 0}));
    auto killed = start(like_runsc("exec sleep 60"));
    killed.signal(SIGTERM);
    EXPECT_EQ(killed.wait(limit), (exec_exit{143, SIGTERM}));
}

TEST_F(exec_shim, a_quick_process_is_reported_even_before_anyone_asks) {
    auto p = start(like_runc("exit 0"));
    pollfd pfd{p.exit_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 20000), 1);
    EXPECT_EQ(p.exit_status(), (exec_exit{0, 0}));
}
