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

jupyter::kernel_message iopub(const std::string& type, const json& content, const std::string& parent) {
    jupyter::kernel_message m;
    m.chan = jupyter::channel::iopub;
    m.msg = protocol::make_message(type, content, "kernel-session", "kernel", parent);
    m.fields.msg_type = type;
    m.fields.parent_msg_id = json::parse(parent).value("msg_id", "");
    return m;
}

jupyter::kernel_message status(const std::string& state, const std::string& parent) {
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
    cell_watch::verdict send(const jupyter::kernel_message& m, std::string_view state = "", clock_t_::time_point at = t0) {
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
    EXPECT_EQ(last.reply->chan, jupyter::channel::shell);
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
    w.reset();
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
