// runsc's platform choice with stand-ins for runsc: one whose kvm run hangs,
// one whose kvm run works. The device check is injected, so these run the
// same on a machine with or without /dev/kvm.
#include "runsc_platform.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

namespace cellgate::launcher {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

class runsc_platform_test : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/cellgate-platform-test-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override { fs::remove_all(dir_); }

    // A stand-in runsc: records each kvm run (its pid in `dir_/runs`), then
    // runs `body` (a shell line).
    std::string fake_runsc(const std::string& name, const std::string& body) {
        const auto path = dir_ / name;
        std::ofstream(path) << "#!/bin/sh\n"
                               "echo $$ >> '" << (dir_ / "runs").string() << "'\n"
                            << body << "\n";
        ::chmod(path.c_str(), 0755);
        return path.string();
    }
    int runs() const {
        std::ifstream in(dir_ / "runs");
        int n = 0;
        for (std::string line; std::getline(in, line);) ++n;
        return n;
    }
    pid_t last_run_pid() const {
        std::ifstream in(dir_ / "runs");
        pid_t pid = 0;
        for (std::string line; std::getline(in, line);) pid = std::stoi(line);
        return pid;
    }
    runsc_platform::options opts(const std::string& runsc) const {
        return {.runsc = runsc,
                .cache_dir = dir_ / "cache",
                .probe_bound = 300ms,
                .device_check = [](std::string* why) {
                    *why = "the device makes virtual machines";
                    return std::string("kvm");
                }};
    }

    fs::path dir_;
};

TEST_F(runsc_platform_test, a_kvm_that_hangs_never_delays_the_start_and_leaves_ptrace_for_the_boot) {
    const auto runsc = fake_runsc("runsc-hangs", "exec sleep 1000");
    runsc_platform p(opts(runsc));
    EXPECT_EQ(runs(), 0);  // nothing is probed until the platform is asked for
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(p.platform(), "ptrace");  // at once, until kvm is proven
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_NE(p.reason().find("probing in the background"), std::string::npos) << p.reason();

    ASSERT_TRUE(p.settled(10s));
    EXPECT_EQ(p.platform(), "ptrace");
    EXPECT_NE(p.reason().find("did not run /bin/true within 300 ms"), std::string::npos) << p.reason();
    // The hung probe was killed, not left spinning.
    ASSERT_EQ(runs(), 1);
    EXPECT_NE(::kill(last_run_pid(), 0), 0);

    // The next start on this boot knows at once, without a probe.
    runsc_platform again(opts(runsc));
    EXPECT_TRUE(again.settled(0ms));
    EXPECT_EQ(again.platform(), "ptrace");
    EXPECT_NE(again.reason().find("this boot's verdict"), std::string::npos) << again.reason();
    EXPECT_EQ(runs(), 1);
}

TEST_F(runsc_platform_test, a_kvm_that_runs_a_process_is_used_once_proven) {
    const auto runsc = fake_runsc("runsc-works", "exit 0");
    std::vector<std::string> notes;
    auto o = opts(runsc);
    std::mutex m;
    o.note = [&](const std::string& line) {
        std::lock_guard l(m);
        notes.push_back(line);
    };
    runsc_platform p(o);
    ASSERT_TRUE(p.settled(10s));
    EXPECT_EQ(p.platform(), "kvm");
    EXPECT_NE(p.reason().find("runsc ran a process on it"), std::string::npos) << p.reason();
    std::lock_guard l(m);
    ASSERT_EQ(notes.size(), 2u);  // ptrace at start, kvm once proven: both in the log
    EXPECT_NE(notes[0].find("platform ptrace"), std::string::npos) << notes[0];
    EXPECT_NE(notes[1].find("platform kvm"), std::string::npos) << notes[1];
}

TEST_F(runsc_platform_test, a_kvm_run_that_fails_says_why) {
    runsc_platform p(opts(fake_runsc("runsc-fails", "echo 'cannot create sandbox: no luck' >&2; exit 3")));
    ASSERT_TRUE(p.settled(10s));
    EXPECT_EQ(p.platform(), "ptrace");
    EXPECT_NE(p.reason().find("exit 3: cannot create sandbox: no luck"), std::string::npos) << p.reason();
}

TEST_F(runsc_platform_test, no_probe_without_a_device_that_makes_vms_or_when_the_platform_is_configured) {
    const auto runsc = fake_runsc("runsc-counted", "exit 0");
    auto o = opts(runsc);
    o.device_check = [](std::string* why) {
        *why = "/dev/kvm cannot be opened: No such file or directory";
        return std::string("ptrace");
    };
    runsc_platform no_device(o);
    EXPECT_TRUE(no_device.settled(0ms));
    EXPECT_EQ(no_device.platform(), "ptrace");
    EXPECT_NE(no_device.reason().find("cannot be opened"), std::string::npos) << no_device.reason();

    auto configured = opts(runsc);
    configured.requested = "ptrace";
    runsc_platform as_configured(configured);
    EXPECT_TRUE(as_configured.settled(0ms));
    EXPECT_EQ(as_configured.reason(), "as configured (--runsc-platform ptrace)");
    EXPECT_EQ(runs(), 0);
}

TEST_F(runsc_platform_test, without_a_writable_cache_every_start_probes_in_the_background) {
    const auto runsc = fake_runsc("runsc-nocache", "exit 0");
    auto o = opts(runsc);
    o.cache_dir.clear();
    runsc_platform first(o);
    ASSERT_TRUE(first.settled(10s));
    runsc_platform second(o);
    ASSERT_TRUE(second.settled(10s));
    EXPECT_EQ(second.platform(), "kvm");
    EXPECT_EQ(runs(), 2);
}

}  // namespace
}  // namespace cellgate::launcher
