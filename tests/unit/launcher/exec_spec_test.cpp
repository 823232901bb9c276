// The exec request: validation, its strict JSON and the signal set.
#include "cellgate/launcher/exec_spec.hpp"
#include "cellgate/launcher/launch_error.hpp"

#include <gtest/gtest.h>

#include <csignal>

using namespace cellgate::launcher;
using nlohmann::json;

namespace {

exec_spec echo() {
    exec_spec s;
    s.argv = {"echo", "hi"};
    return s;
}

void expect_refused(const exec_spec& s, const std::string& fragment) {
    try {
        validate_exec_spec(s);
        ADD_FAILURE() << "accepted an exec spec that should be refused (" << fragment << ")";
    } catch (const spec_error& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(exec_spec, a_plain_command_is_accepted_with_its_defaults) {
    const auto s = echo();
    EXPECT_NO_THROW(validate_exec_spec(s));
    EXPECT_EQ(s.cwd, "/workspace");
    EXPECT_FALSE(s.tty);
    EXPECT_FALSE(s.stdin_);
}

TEST(exec_spec, argv_is_bounded_and_free_of_nul) {
    exec_spec s = echo();
    s.argv.clear();
    expect_refused(s, "argv");
    s.argv = {""};
    expect_refused(s, "argv[0] is empty");
    s.argv = {"echo", std::string("a\0b", 3)};
    expect_refused(s, "argv[1] holds a NUL");
    s.argv.assign(257, "x");
    expect_refused(s, "257 arguments");
    s.argv.assign(256, "x");
    EXPECT_NO_THROW(validate_exec_spec(s));
    s.argv = {"echo", std::string(64u << 10, 'a')};
    expect_refused(s, "64 KiB");
    s.argv = {"echo", std::string((64u << 10) - 7, 'a')};  // "echo\0" + arg + "\0" is exactly 64 KiB
    EXPECT_NO_THROW(validate_exec_spec(s));
}

TEST(exec_spec, cwd_is_absolute_without_dot_dot_or_nul) {
    exec_spec s = echo();
    for (const char* ok : {"/", "/workspace", "/workspace/a/./b", "/tmp/..x", "/tmp/x.."}) {
        s.cwd = ok;
        EXPECT_NO_THROW(validate_exec_spec(s)) << ok;
    }
    for (const char* bad : {"", "workspace", "./x", "/workspace/..", "/workspace/../etc", "/../x", "/a/../../b"}) {
        s.cwd = bad;
        EXPECT_THROW(validate_exec_spec(s), spec_error) << bad;
    }
    s.cwd = std::string("/tmp\0/x", 7);
    expect_refused(s, "NUL");
    s.cwd = "/" + std::string(4096, 'a');
    expect_refused(s, "4096");
}

TEST(exec_spec, env_names_are_the_clients_except_a_short_deny_list) {
    exec_spec s = echo();
    // Names the kernel's allow-list refuses are the client's own business here.
    s.env = {{"LD_PRELOAD", "x"}, {"PATH", "/bin"}, {"HOME", "/workspace"}, {"lower.case-ünïcode", "1"},
             {"1STARTS_WITH_DIGIT", ""}, {"TERM", "dumb"}, {"KERNEL_X", "y"}};
    EXPECT_NO_THROW(validate_exec_spec(s));
    for (const auto& [name, fragment] : std::vector<std::pair<std::string, std::string>>{
             {"", "needs a name"},
             {"A=B", "holds '='"},
             {std::string("A\0B", 3), "NUL"},
             {"CELLGATE_PRELOAD", "reserved"},
             {"CELLGATE_", "reserved"}}) {
        s.env = {{name, "v"}};
        expect_refused(s, fragment);
    }
    s.env = {{"CELLGATE", "v"}, {"XCELLGATE_X", "v"}};  // only the prefix is reserved
    EXPECT_NO_THROW(validate_exec_spec(s));
}

TEST(exec_spec, env_values_and_totals_are_bounded) {
    exec_spec s = echo();
    s.env = {{"V", std::string(32u << 10, 'v')}};
    EXPECT_NO_THROW(validate_exec_spec(s));
    s.env = {{"V", std::string((32u << 10) + 1, 'v')}};
    expect_refused(s, "32 KiB");
    s.env = {{"V", std::string("a\0b", 3)}};
    expect_refused(s, "NUL");
    s.env.clear();
    for (int i = 0; i < 257; ++i) s.env["V" + std::to_string(i)] = "";
    expect_refused(s, "too many");
    s.env.clear();
    for (int i = 0; i < 9; ++i) s.env["V" + std::to_string(i)] = std::string(30u << 10, 'v');
    expect_refused(s, "256 KiB");
}

TEST(exec_spec, the_terminal_size_is_one_to_a_thousand) {
    exec_spec s = echo();
    s.tty = true;
    s.rows = 1;
    s.cols = 1000;
    EXPECT_NO_THROW(validate_exec_spec(s));
    s.rows = 0;
    expect_refused(s, "rows and cols");
    s.rows = 24;
    s.cols = 1001;
    expect_refused(s, "rows and cols");
}

TEST(exec_spec, only_the_exec_signals_are_known) {
    for (const int sig : {SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
        EXPECT_TRUE(is_exec_signal(sig)) << sig;
        EXPECT_EQ(exec_signal_from_name(exec_signal_name(sig)), sig);
    }
    for (const int sig : {0, SIGSTOP, SIGCONT, SIGTSTP, SIGCHLD, SIGSEGV, SIGRTMIN, 64, -9})
        EXPECT_FALSE(is_exec_signal(sig)) << sig;
    for (const char* name : {"SIGSTOP", "KILL", "sigkill", "9", "", "SIGKILL "})
        EXPECT_FALSE(exec_signal_from_name(name)) << name;
}

TEST(exec_spec, json_round_trips_and_is_strict) {
    exec_spec s;
    s.argv = {"sh", "-c", "stty size"};
    s.cwd = "/tmp";
    s.env = {{"A", "1"}};
    s.tty = true;
    s.rows = 40;
    s.cols = 120;
    s.stdin_ = true;
    const json j = s;
    EXPECT_EQ(j.at("stdin"), true);
    const auto back = j.get<exec_spec>();
    EXPECT_EQ(back.argv, s.argv);
    EXPECT_EQ(back.cwd, "/tmp");
    EXPECT_EQ(back.env, s.env);
    EXPECT_TRUE(back.tty && back.stdin_);
    EXPECT_EQ(back.rows, 40);
    EXPECT_EQ(back.cols, 120);
    for (const char* bad : {R"([])", R"({"argv": "sh"})", R"({"argv": [1]})", R"({"argv": ["a"], "user": 0})",
                            R"({"cwd": 5})", R"({"env": []})", R"({"env": {"A": 1}})", R"({"tty": "yes"})",
                            R"({"rows": -1})", R"({"rows": 70000})", R"({"cols": 1.5})", R"({"stdin": 1})",
                            R"({"privileged": true})"})
        EXPECT_THROW(json::parse(bad).get<exec_spec>(), spec_error) << bad;
}
