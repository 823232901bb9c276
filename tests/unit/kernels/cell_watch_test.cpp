#include "kernels/cell_watch.hpp"
#include "kernels/cell_notices.hpp"

#include <gtest/gtest.h>

using namespace cellgate;
using kernels::cell_watch;
using json = nlohmann::json;

namespace {

using clock_t_ = cell_watch::clock;
const auto t0 = clock_t_::time_point{} + std::chrono::hours(1);

// A client's execute_request header, as the parent of what the kernel publishes.
std::string request_header(const std::string& msg_id, const std::string& type = "execute_request") {
    return json{{"msg_id", msg_id}, {"msg_type", type}, {"session", "client-1"}, {"username", "u"},
                {"date", "2026-12-02T00:00:00Z"}, {"version", "5.3"}}
        .dump();
}

messaging::kernel_message iopub(const std::string& type, const json& content, const std::string& parent) {
    messaging::kernel_message m;
    m.chan = messaging::channel::iopub;
    m.msg = protocol::make_message(type, content, "kernel-session", "kernel", parent);
    m.fields.msg_type = type;
    m.fields.parent_msg_id = json::parse(parent).value("msg_id", "");
    return m;
}

messaging::kernel_message status(const std::string& state, const std::string& parent) {
    return iopub("status", {{"execution_state", state}}, parent);
}

std::string text_of(const cell_watch::made_message& m) { return json::parse(m->msg.content).value("text", ""); }

struct watch_test : ::testing::Test {
    cell_watch w;
    kernels::kernel_policy p;
    const std::string cell = request_header("cell-1");

    void SetUp() override {
        p.exec_timeout = std::chrono::seconds(10);
        p.output_limit_bytes = 100;
        p.result_limit_bytes = 1000;
    }
    cell_watch::verdict send(const messaging::kernel_message& m, std::string_view state = "", clock_t_::time_point at = t0) {
        return w.on_iopub(m, state, p, at);
    }
    void start(clock_t_::time_point at = t0) { send(status("busy", cell), "busy", at); }
};

}  // namespace

TEST_F(watch_test, follows_a_client_cell_from_busy_to_idle) {
    EXPECT_FALSE(w.running());
    start();
    EXPECT_TRUE(w.running());
    send(status("idle", cell), "idle");
    EXPECT_FALSE(w.running());
}

TEST_F(watch_test, leaves_the_gateways_own_cells_and_other_requests_alone) {
    w.own("cell-1");
    start();
    EXPECT_FALSE(w.running());
    send(status("busy", request_header("k-1", "kernel_info_request")), "busy");
    EXPECT_FALSE(w.running());
    send(status("busy", "{}"), "busy");
    EXPECT_FALSE(w.running());
}

TEST_F(watch_test, stream_output_past_the_limit_is_cut_with_a_notice_under_the_cell) {
    start();
    EXPECT_TRUE(send(iopub("stream", {{"name", "stdout"}, {"text", std::string(40, 'a')}}, cell)).deliver);
    // This one passes the limit: its head up to the limit is kept, then the notice.
    const auto v = send(iopub("stream", {{"name", "stdout"}, {"text", std::string(200, 'b')}}, cell));
    EXPECT_FALSE(v.deliver);
    ASSERT_EQ(v.before.size(), 2u);
    const auto head = text_of(v.before[0]);
    EXPECT_FALSE(head.empty());
    EXPECT_LT(head.size(), 100u);
    EXPECT_EQ(head, std::string(head.size(), 'b'));
    // The notice a /v1 execution appends, on the stream that reached the limit.
    EXPECT_EQ(text_of(v.before[1]), kernels::cell_notices::output_truncated(p.output_limit_bytes));
    EXPECT_EQ(json::parse(v.before[1]->msg.content).value("name", ""), "stdout");
    for (const auto& m : v.before) EXPECT_EQ(m->fields.parent_msg_id, "cell-1");
    EXPECT_EQ(json::parse(v.before[1]->msg.parent_header).value("session", ""), "client-1");
    // Later output is withheld without another notice; the next cell starts afresh.
    const auto later = send(iopub("stream", {{"name", "stdout"}, {"text", "c"}}, cell));
    EXPECT_FALSE(later.deliver);
    EXPECT_TRUE(later.before.empty());
    send(status("idle", cell), "idle");
    const auto next = request_header("cell-2");
    send(status("busy", next), "busy");
    EXPECT_TRUE(send(iopub("stream", {{"name", "stdout"}, {"text", "d"}}, next)).deliver);
}

TEST_F(watch_test, a_cut_never_splits_a_character_or_an_escape) {
    p.output_limit_bytes = 60;
    start();
    // "é" is two bytes and "\n" an escape in the raw JSON: wherever the limit
    // falls, the head must decode and hold only whole characters.
    std::string text;
    for (int i = 0; i < 40; ++i) text += "é\n";
    const auto v = send(iopub("stream", {{"name", "stderr"}, {"text", text}}, cell));
    ASSERT_EQ(v.before.size(), 2u);
    const auto head = text_of(v.before[0]);
    EXPECT_EQ(head, text.substr(0, head.size()));
    EXPECT_EQ(json::parse(v.before[0]->msg.content).value("name", ""), "stderr");
    EXPECT_EQ(json::parse(v.before[1]->msg.content).value("name", ""), "stderr");
}

TEST_F(watch_test, zero_means_no_output_limit) {
    p.output_limit_bytes = 0;
    start();
    EXPECT_TRUE(send(iopub("stream", {{"name", "stdout"}, {"text", std::string(5000, 'a')}}, cell)).deliver);
}

TEST_F(watch_test, rich_outputs_and_errors_have_their_own_caps) {
    start();
    EXPECT_TRUE(send(iopub("display_data", {{"data", {{"text/plain", std::string(500, 'x')}}}, {"metadata", json::object()}}, cell)).deliver);
    const auto over = send(iopub("display_data", {{"data", {{"text/plain", std::string(800, 'x')}}}, {"metadata", json::object()}}, cell));
    EXPECT_FALSE(over.deliver);
    ASSERT_EQ(over.before.size(), 1u);
    EXPECT_NE(text_of(over.before[0]).find("result_limit"), std::string::npos);
    // Stream output is still within its own limit.
    EXPECT_TRUE(send(iopub("stream", {{"name", "stdout"}, {"text", "ok"}}, cell)).deliver);
    const json err = {{"ename", "E"}, {"evalue", "v"}, {"traceback", json::array()}};
    for (std::size_t i = 0; i < cell_watch::max_errors_per_cell; ++i) EXPECT_TRUE(send(iopub("error", err, cell)).deliver);
    EXPECT_FALSE(send(iopub("error", err, cell)).deliver);
}

TEST_F(watch_test, output_of_other_cells_passes) {
    start();
    send(iopub("stream", {{"name", "stdout"}, {"text", std::string(300, 'a')}}, cell));
    EXPECT_TRUE(send(iopub("stream", {{"name", "stdout"}, {"text", std::string(300, 'a')}}, request_header("other"))).deliver);
}

TEST_F(watch_test, past_the_time_limit_interrupts_then_gives_up_with_an_error_and_a_reply) {
    w.requested("cell-1", 7);
    start();
    send(iopub("execute_input", {{"code", "while True: pass"}, {"execution_count", 12}}, cell));
    const auto grace = std::chrono::seconds(3);
    EXPECT_EQ(w.check(p, t0 + std::chrono::seconds(9), grace).what, cell_watch::action::none);
    const auto first = w.check(p, t0 + std::chrono::seconds(10), grace);
    ASSERT_EQ(first.what, cell_watch::action::interrupt);
    EXPECT_NE(text_of(first.notice).find("time limit of 10 s"), std::string::npos);
    EXPECT_EQ(first.notice->fields.parent_msg_id, "cell-1");
    EXPECT_EQ(w.check(p, t0 + std::chrono::seconds(12), grace).what, cell_watch::action::none);  // once
    const auto last = w.check(p, t0 + std::chrono::seconds(13), grace);
    ASSERT_EQ(last.what, cell_watch::action::restart);
    EXPECT_EQ(last.set_id, 7u);
    ASSERT_TRUE(last.reply && last.error);
    EXPECT_EQ(last.reply->chan, messaging::channel::shell);
    EXPECT_EQ(last.reply->fields.msg_type, "execute_reply");
    EXPECT_EQ(last.reply->fields.parent_msg_id, "cell-1");
    const auto reply = json::parse(last.reply->msg.content);
    EXPECT_EQ(reply.value("status", ""), "error");
    EXPECT_EQ(reply.value("ename", ""), "TimeoutError");
    EXPECT_EQ(reply.value("execution_count", 0), 12);
    EXPECT_EQ(w.check(p, t0 + std::chrono::seconds(60), grace).what, cell_watch::action::none);
}

TEST_F(watch_test, a_cell_that_stops_on_interrupt_is_done) {
    start();
    ASSERT_EQ(w.check(p, t0 + std::chrono::seconds(11), std::chrono::seconds(3)).what, cell_watch::action::interrupt);
    send(status("idle", cell), "idle");
    EXPECT_EQ(w.check(p, t0 + std::chrono::seconds(30), std::chrono::seconds(3)).what, cell_watch::action::none);
}

TEST_F(watch_test, the_clock_starts_when_the_kernel_starts_the_cell_not_when_it_was_queued) {
    w.requested("cell-1", 2);
    w.requested("cell-2", 2);
    start();
    send(status("idle", cell), "idle");
    const auto second = request_header("cell-2");
    send(status("busy", second), "busy", t0 + std::chrono::seconds(8));
    EXPECT_EQ(w.check(p, t0 + std::chrono::seconds(12), std::chrono::seconds(3)).what, cell_watch::action::none);
    EXPECT_EQ(w.check(p, t0 + std::chrono::seconds(18), std::chrono::seconds(3)).what, cell_watch::action::interrupt);
}

TEST_F(watch_test, no_time_limit_when_it_is_zero_or_after_a_reset) {
    start();
    auto none = p;
    none.exec_timeout = std::chrono::seconds(0);
    EXPECT_EQ(w.check(none, t0 + std::chrono::hours(5), std::chrono::seconds(3)).what, cell_watch::action::none);
    w.reset(t0 + std::chrono::hours(5));
    EXPECT_EQ(w.check(p, t0 + std::chrono::hours(5), std::chrono::seconds(3)).what, cell_watch::action::none);
}

TEST(cell_watch_memory, remembers_a_bounded_number_of_requests) {
    cell_watch w;
    for (int i = 0; i < 10000; ++i) {
        w.requested("r-" + std::to_string(i), 3);
        w.own("o-" + std::to_string(i));
    }
    // Enforcement does not depend on the memory: a forgotten request still runs under the limit.
    kernels::kernel_policy p;
    p.exec_timeout = std::chrono::seconds(1);
    const auto h = request_header("r-0");
    w.on_iopub(status("busy", h), "busy", p, t0);
    EXPECT_TRUE(w.running());
    const auto last = [&] {
        w.check(p, t0 + std::chrono::seconds(1), std::chrono::seconds(1));
        return w.check(p, t0 + std::chrono::seconds(2), std::chrono::seconds(1));
    }();
    EXPECT_EQ(last.what, cell_watch::action::restart);
    EXPECT_EQ(last.set_id, 0u);  // forgotten: the error still reaches every client on iopub
}

// --- What the ledger hears of each client cell (cell_summary.hpp) ---

namespace {

messaging::kernel_message reply(const std::string& status, const std::string& parent, const json& extra = json::object()) {
    messaging::kernel_message m = iopub("execute_reply", json{{"status", status}, {"execution_count", 3}}, parent);
    m.chan = messaging::channel::shell;
    auto content = json::parse(m.msg.content);
    content.update(extra);
    m.msg.content = content.dump();
    return m;
}

std::vector<kernels::cell_summary> ended(std::vector<kernels::cell_summary> all) {
    std::erase_if(all, [](const auto& s) { return !s.ended; });
    return all;
}

}  // namespace

TEST_F(watch_test, a_client_cell_is_summarised_when_it_starts_and_when_it_ends) {
    w.requested("cell-1", 4);
    start();
    auto first = w.take_reports(t0);
    ASSERT_EQ(first.size(), 1u);
    EXPECT_FALSE(first[0].ended);
    EXPECT_EQ(first[0].id, "cell-1");
    EXPECT_EQ(first[0].surface, "jupyter");
    EXPECT_EQ(first[0].started, t0);
    EXPECT_TRUE(w.take_reports(t0).empty());  // taken once

    const std::string code = "print('h\u00e9')\nx = \"q\"\n";  // escapes in the JSON
    send(iopub("execute_input", {{"code", code}, {"execution_count", 3}}, cell));
    send(iopub("stream", {{"name", "stdout"}, {"text", "hello\n"}}, cell));
    send(iopub("stream", {{"name", "stderr"}, {"text", "é"}}, cell));
    send(iopub("display_data", {{"data", {{"text/plain", "x"}}}, {"metadata", json::object()}}, cell));
    send(iopub("execute_result", {{"data", {{"text/plain", "y"}}}, {"metadata", json::object()}, {"execution_count", 3}}, cell));
    w.on_reply(reply("ok", cell));
    EXPECT_TRUE(w.take_reports(t0 + std::chrono::seconds(1)).empty());  // still running until idle
    send(status("idle", cell), "idle", t0 + std::chrono::seconds(2));
    const auto last = w.take_reports(t0 + std::chrono::seconds(2));
    ASSERT_EQ(last.size(), 1u);
    const auto& s = last[0];
    EXPECT_TRUE(s.ended);
    EXPECT_EQ(s.id, "cell-1");
    ASSERT_TRUE(s.code);
    EXPECT_EQ(*s.code, code);
    EXPECT_EQ(s.code_bytes, code.size());
    EXPECT_EQ(s.started, t0);
    EXPECT_EQ(s.ended_at, t0 + std::chrono::seconds(2));
    EXPECT_EQ(s.status, "ok");
    EXPECT_EQ(s.stdout_bytes, 6u);
    EXPECT_EQ(s.stderr_bytes, 2u);  // decoded UTF-8 bytes, not the JSON's
    EXPECT_EQ(s.results, 2u);
    EXPECT_GT(s.result_bytes, 0u);
    EXPECT_FALSE(s.output_truncated || s.results_truncated || s.kernel_restarted);
}

TEST_F(watch_test, the_gateways_own_cells_and_other_requests_are_not_summarised) {
    w.own("own-1");
    const auto own = request_header("own-1");
    send(status("busy", own), "busy");
    send(iopub("execute_input", {{"code", "1"}, {"execution_count", 1}}, own));
    send(iopub("stream", {{"name", "stdout"}, {"text", "x"}}, own));
    w.on_reply(reply("ok", own));
    send(status("idle", own), "idle");
    const auto info = request_header("k-1", "kernel_info_request");
    send(status("busy", info), "busy");
    send(status("idle", info), "idle");
    EXPECT_TRUE(w.take_reports(t0 + std::chrono::hours(1)).empty());
}

TEST_F(watch_test, a_cell_past_its_output_limit_counts_what_it_printed_and_says_it_was_cut) {
    start();
    send(iopub("stream", {{"name", "stdout"}, {"text", std::string(40, 'a')}}, cell));
    send(iopub("stream", {{"name", "stdout"}, {"text", std::string(200, 'b')}}, cell));
    send(iopub("stream", {{"name", "stdout"}, {"text", "c"}}, cell));
    w.on_reply(reply("ok", cell));
    send(status("idle", cell), "idle");
    const auto s = ended(w.take_reports(t0));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].stdout_bytes, 241u);
    EXPECT_TRUE(s[0].output_truncated);
    EXPECT_FALSE(s[0].code);  // no execute_input (a silent request): no code
}

TEST_F(watch_test, the_end_waits_a_little_for_a_reply_that_comes_after_the_idle) {
    start();
    send(status("idle", cell), "idle", t0 + std::chrono::seconds(1));
    EXPECT_TRUE(ended(w.take_reports(t0 + std::chrono::seconds(1))).empty());
    w.on_reply(reply("aborted", cell));
    auto s = ended(w.take_reports(t0 + std::chrono::seconds(1)));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, "aborted");
    EXPECT_EQ(s[0].ended_at, t0 + std::chrono::seconds(1));

    // No reply at all: the cell ends reply_wait after its idle, on what iopub said.
    const auto second = request_header("cell-2");
    send(status("busy", second), "busy", t0 + std::chrono::seconds(5));
    send(iopub("error", {{"ename", "ZeroDivisionError"}, {"evalue", "x"}, {"traceback", json::array()}}, second));
    send(status("idle", second), "idle", t0 + std::chrono::seconds(6));
    EXPECT_TRUE(ended(w.take_reports(t0 + std::chrono::seconds(6))).empty());
    s = ended(w.take_reports(t0 + std::chrono::seconds(6) + cell_watch::reply_wait));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].id, "cell-2");
    EXPECT_EQ(s[0].status, "error");
    EXPECT_EQ(s[0].error_name, "ZeroDivisionError");

    // The next cell's start ends a waiting one at once.
    const auto third = request_header("cell-3");
    send(status("busy", third), "busy", t0 + std::chrono::seconds(10));
    send(iopub("error", {{"ename", "KeyboardInterrupt"}, {"evalue", ""}, {"traceback", json::array()}}, third));
    send(status("idle", third), "idle", t0 + std::chrono::seconds(11));
    send(status("busy", request_header("cell-4")), "busy", t0 + std::chrono::seconds(11));
    s = ended(w.take_reports(t0 + std::chrono::seconds(11)));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, "interrupted");
}

TEST_F(watch_test, a_cell_past_its_time_limit_ends_as_a_timeout_and_one_that_killed_the_kernel_as_kernel_died) {
    start();
    ASSERT_EQ(w.check(p, t0 + std::chrono::seconds(10), std::chrono::seconds(3)).what, cell_watch::action::interrupt);
    send(iopub("error", {{"ename", "KeyboardInterrupt"}, {"evalue", ""}, {"traceback", json::array()}}, cell));
    w.on_reply(reply("error", cell, {{"ename", "KeyboardInterrupt"}}));
    send(status("idle", cell), "idle", t0 + std::chrono::seconds(10));
    auto s = ended(w.take_reports(t0 + std::chrono::seconds(10)));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, "timeout");
    EXPECT_FALSE(s[0].kernel_restarted);

    // Given up on: the kernel restarts (the kernel resets the watch).
    const auto second = request_header("cell-2");
    send(status("busy", second), "busy", t0 + std::chrono::seconds(20));
    w.check(p, t0 + std::chrono::seconds(30), std::chrono::seconds(3));
    ASSERT_EQ(w.check(p, t0 + std::chrono::seconds(33), std::chrono::seconds(3)).what, cell_watch::action::restart);
    w.reset(t0 + std::chrono::seconds(33));
    s = ended(w.take_reports(t0 + std::chrono::seconds(33)));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, "timeout");
    EXPECT_TRUE(s[0].kernel_restarted);
    EXPECT_EQ(s[0].ended_at - s[0].started, std::chrono::seconds(13));

    const auto third = request_header("cell-3");
    send(status("busy", third), "busy", t0 + std::chrono::seconds(40));
    w.reset(t0 + std::chrono::seconds(41));  // the kernel died under it
    s = ended(w.take_reports(t0 + std::chrono::seconds(41)));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, "kernel_died");
    EXPECT_FALSE(w.running());
}

TEST(cell_watch_memory, keeps_a_bounded_number_of_summaries_nobody_takes) {
    cell_watch w;
    kernels::kernel_policy p;
    for (int i = 0; i < 1000; ++i) {
        const auto h = request_header("r-" + std::to_string(i));
        w.on_iopub(status("busy", h), "busy", p, t0);
        w.on_iopub(status("idle", h), "idle", p, t0);
    }
    const auto all = w.take_reports(t0 + std::chrono::hours(1));
    EXPECT_LE(all.size(), cell_watch::max_reports);
    ASSERT_FALSE(all.empty());
    EXPECT_EQ(all.back().id, "r-999");  // the newest are kept
}
