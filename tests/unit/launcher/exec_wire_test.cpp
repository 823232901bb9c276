// The lines an exec's handle speaks, the shim's request, and how the shim
// tells an exit from a signal under each runtime.
#include "exec_shim.hpp"
#include "exec_wire.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <csignal>
#include <stdexcept>

using namespace cellgate::launcher;
using nlohmann::json;

TEST(exec_wire, signal_and_exit_lines_round_trip_and_refuse_the_rest) {
    EXPECT_EQ(signal_line(SIGTERM), "{\"signal\":\"SIGTERM\"}\n");
    EXPECT_EQ(parse_signal_line(R"({"signal":"SIGKILL"})"), SIGKILL);
    for (const char* bad : {"", "{}", "[]", R"({"signal":9})", R"({"signal":"SIGSTOP"})", R"({"signal":"SIGINT","x":1})",
                            R"({"sig":"SIGINT"})", "not json"})
        EXPECT_FALSE(parse_signal_line(bad)) << bad;
    EXPECT_FALSE(parse_signal_line(R"({"signal":"SIGINT"})" + std::string(200, ' ')));

    const exec_exit e{143, 15};
    auto line = exit_line(e);
    ASSERT_EQ(line.back(), '\n');
    line.pop_back();
    EXPECT_EQ(parse_exit_line(line), e);
    for (const char* bad : {R"({"exit":{"code":1}})", R"({"exit":{"code":1,"signal":0,"x":1}})",
                            R"({"exit":{"code":"1","signal":0}})", R"({"exit":{"code":256,"signal":0}})",
                            R"({"exit":{"code":0,"signal":99}})", R"({"exit":[]})", R"({"started":{}})"})
        EXPECT_FALSE(parse_exit_line(bad)) << bad;
}

TEST(exec_wire, a_line_buffer_hands_out_whole_lines_and_refuses_long_ones) {
    line_buffer b(8);
    EXPECT_TRUE(b.append("abc\nde"));
    EXPECT_EQ(b.pop(), "abc");
    EXPECT_FALSE(b.pop());
    EXPECT_TRUE(b.append("f\n\n"));
    EXPECT_EQ(b.pop(), "def");
    EXPECT_EQ(b.pop(), "");
    EXPECT_TRUE(b.empty());
    EXPECT_TRUE(b.append("12345678"));
    EXPECT_FALSE(b.append("9"));  // a partial line past the limit
    line_buffer c(4);
    EXPECT_FALSE(c.append("12345\nok\n"));  // a complete one too
    line_buffer d(16);
    EXPECT_TRUE(d.append("a\nrest"));
    EXPECT_EQ(d.pop(), "a");
    EXPECT_EQ(d.take(), "rest");
}

TEST(exec_shim_status, runc_reports_the_exact_wait_status) {
    auto exited = [](int code) { return code << 8; };
    EXPECT_EQ(exit_of(exited(0), false, {}), (exec_exit{0, 0}));
    EXPECT_EQ(exit_of(exited(143), false, {}), (exec_exit{143, 0}));  // exit(143) is an exit
    EXPECT_EQ(exit_of(SIGTERM, false, {}), (exec_exit{143, SIGTERM}));
    EXPECT_EQ(exit_of(SIGKILL, false, {}), (exec_exit{137, SIGKILL}));
}

TEST(exec_shim_status, runsc_names_a_signal_only_when_it_was_sent) {
    auto exited = [](int code) { return code << 8; };
    EXPECT_EQ(exit_of(exited(3), true, {}), (exec_exit{3, 0}));
    EXPECT_EQ(exit_of(exited(143), true, {}), (exec_exit{143, 0}));
    EXPECT_EQ(exit_of(exited(143), true, {SIGTERM}), (exec_exit{143, SIGTERM}));
    EXPECT_EQ(exit_of(exited(143), true, {SIGKILL}), (exec_exit{143, 0}));
    EXPECT_EQ(exit_of(exited(137), true, {SIGKILL}), (exec_exit{137, SIGKILL}));
    // runsc's own failure (the sandbox went away) after our SIGKILL is that SIGKILL.
    EXPECT_EQ(exit_of(exited(128), true, {SIGKILL}), (exec_exit{137, SIGKILL}));
    EXPECT_EQ(exit_of(exited(128), true, {SIGTERM}), (exec_exit{128, 0}));
    // The waiter itself killed: nobody knows.
    EXPECT_EQ(exit_of(SIGKILL, true, {SIGKILL}), (exec_exit{-1, 0}));
}

TEST(exec_shim_request, round_trips_and_refuses_malformed_ones) {
    shim_request r;
    r.command.start = {"runsc", "--root", "/r", "exec", "--detach", "id"};
    r.command.pid_file = "/x/exec.pid";
    r.command.internal_pid_file = "/x/exec.internal-pid";
    r.command.signal_command = {"runsc", "kill", "--pid", "{pid}", "id", "{signal}"};
    r.command.status_is_exit_code = true;
    r.command.log = "/x/runtime.log";
    r.start_timeout = std::chrono::seconds(7);
    auto line = shim_request_line(r);
    line.pop_back();
    const auto back = parse_shim_request(line);
    EXPECT_EQ(back.command.start, r.command.start);
    EXPECT_EQ(back.command.signal_command, r.command.signal_command);
    EXPECT_EQ(back.command.internal_pid_file, r.command.internal_pid_file);
    EXPECT_TRUE(back.command.status_is_exit_code);
    EXPECT_EQ(back.start_timeout, std::chrono::seconds(7));
    auto j = json::parse(line);
    j["start"] = json::array();
    EXPECT_THROW(parse_shim_request(j.dump()), std::invalid_argument);
    j = json::parse(line);
    j["internal_pid_file"] = "";
    EXPECT_THROW(parse_shim_request(j.dump()), std::invalid_argument);  // a signal command needs the inner pid
    j = json::parse(line);
    j["extra"] = 1;
    EXPECT_THROW(parse_shim_request(j.dump()), std::invalid_argument);
    EXPECT_THROW(parse_shim_request("{}"), std::invalid_argument);
}
