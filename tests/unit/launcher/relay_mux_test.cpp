// The gVisor relay's framing and the host side's stream rules: what a
// sandbox may send, and what ends its relay.
#include "relay/relay_mux.hpp"
#include "relay/relay_protocol.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace cellgate::launcher::relay;

namespace {

std::string frame(frame_type t, std::uint32_t stream, std::string_view payload = {}) {
    std::string out;
    append_frame(out, t, stream, payload);
    return out;
}

std::string credit(std::uint32_t stream, std::uint32_t n) {
    std::string out;
    append_credit(out, stream, n);
    return out;
}

std::string hello() { return frame(frame_type::hello, 0, hello_payload); }
std::string ready() { return frame(frame_type::ready, 0); }

struct parsed {
    frame_type type;
    std::uint32_t stream;
    std::string payload;
};

// Splits what the mux queued for the sandbox into frames (and takes it).
std::vector<parsed> drain(relay_mux& m) {
    std::vector<parsed> out;
    const std::string bytes(m.to_sandbox());
    m.sandbox_written(bytes.size());
    std::size_t pos = 0;
    while (pos < bytes.size()) {
        frame_header h;
        EXPECT_EQ(parse_header(std::string_view(bytes).substr(pos, header_bytes), h), std::nullopt);
        out.push_back({h.type, h.stream, bytes.substr(pos + header_bytes, h.length)});
        pos += header_bytes + h.length;
    }
    return out;
}

// A mux past hello and ready.
relay_mux started(mux_limits limits = {}) {
    relay_mux m(limits);
    EXPECT_TRUE(m.feed(hello() + ready()));
    return m;
}

}  // namespace

TEST(relay_protocol, a_frame_round_trips_through_its_header) {
    const auto f = frame(frame_type::data, 0x01020304, "abc");
    ASSERT_EQ(f.size(), header_bytes + 3);
    EXPECT_EQ(f.substr(0, 9), std::string("\x04\x01\x02\x03\x04\x00\x00\x00\x03", 9)) << "big-endian";
    frame_header h;
    EXPECT_EQ(parse_header(f, h), std::nullopt);
    EXPECT_EQ(h.type, frame_type::data);
    EXPECT_EQ(h.stream, 0x01020304u);
    EXPECT_EQ(h.length, 3u);
}

TEST(relay_protocol, impossible_headers_are_refused_before_any_payload) {
    auto refused = [](frame_type t, std::uint32_t stream, std::uint32_t length) {
        std::string f;
        append_frame(f, t, stream);
        f[5] = static_cast<char>(length >> 24);
        f[6] = static_cast<char>(length >> 16);
        f[7] = static_cast<char>(length >> 8);
        f[8] = static_cast<char>(length);
        frame_header h;
        return parse_header(f, h).value_or("");
    };
    EXPECT_EQ(refused(frame_type::data, 1, max_data_bytes + 1), "data frame of 65537 bytes");
    EXPECT_EQ(refused(frame_type::data, 1, 0xFFFFFFFF), "data frame of 4294967295 bytes");
    EXPECT_EQ(refused(frame_type::data, 1, 0), "data frame of 0 bytes");
    EXPECT_EQ(refused(frame_type::credit, 1, 8), "credit frame of 8 bytes");
    EXPECT_EQ(refused(frame_type::close, 1, 1), "close frame of 1 bytes");
    EXPECT_EQ(refused(frame_type::open, 1, 2), "open frame of 2 bytes");
    EXPECT_EQ(refused(frame_type::ready, 0, 4), "ready frame of 4 bytes");
    EXPECT_EQ(refused(frame_type::data, 0, 1), "data frame on stream 0");
    EXPECT_EQ(refused(frame_type::ready, 7, 0), "ready frame on stream 7");
    std::string unknown(9, '\0');
    unknown[0] = 7;
    frame_header h;
    EXPECT_EQ(parse_header(unknown, h), "unknown frame type 7");
    unknown[0] = 0;
    EXPECT_EQ(parse_header(unknown, h), "unknown frame type 0");
}

TEST(relay_mux, nothing_listens_until_hello_and_ready) {
    relay_mux m;
    EXPECT_TRUE(m.feed(hello()));
    EXPECT_FALSE(m.ready());
    EXPECT_TRUE(m.feed(ready()));
    EXPECT_TRUE(m.ready());
}

TEST(relay_mux, frames_may_arrive_a_byte_at_a_time) {
    relay_mux m;
    const auto bytes = hello() + ready();
    for (char c : bytes) ASSERT_TRUE(m.feed(std::string_view(&c, 1)));
    EXPECT_TRUE(m.ready());
}

TEST(relay_mux, anything_but_hello_first_ends_the_relay) {
    relay_mux m;
    EXPECT_FALSE(m.feed(ready()));
    EXPECT_EQ(m.error(), "the sandbox side did not begin with hello (got ready)");
    relay_mux wrong_version;
    EXPECT_FALSE(wrong_version.feed(frame(frame_type::hello, 0, "cellgate-relay/2")));
    relay_mux garbage;
    EXPECT_FALSE(garbage.feed(std::string(64, '\xff')));
    EXPECT_EQ(garbage.error(), "unknown frame type 255");
    EXPECT_FALSE(garbage.feed(hello())) << "a failed mux stays failed";
}

TEST(relay_mux, a_resumed_relay_sends_reset_first_and_skips_to_the_next_hello) {
    // A sandbox restored from a checkpoint: the new host side begins with
    // reset, and what the sandbox was still writing to the old pipe (the
    // tail of a data frame, whole frames of old streams) comes before its
    // new hello and is skipped, however it is split.
    relay_mux m({}, /*resumed=*/true);
    const std::string queued(m.to_sandbox());
    ASSERT_EQ(queued.size(), header_bytes);
    EXPECT_EQ(static_cast<frame_type>(queued[0]), frame_type::reset);
    EXPECT_EQ(read_u32(queued.substr(1)), 0u);
    EXPECT_EQ(read_u32(queued.substr(5)), 0u);
    const std::string stale = std::string("tail of a frame\x01\x00") + frame(frame_type::data, 7, "old bytes") +
                              frame(frame_type::close, 7);
    const auto bytes = stale + hello() + ready();
    for (char c : bytes) ASSERT_TRUE(m.feed(std::string_view(&c, 1))) << m.error();
    EXPECT_TRUE(m.ready());
    EXPECT_EQ(m.stream_count(), 0u);
    EXPECT_EQ(m.open(1), 1u) << "stream ids start again at 1";
    // After the hello the rules are the usual ones: a second hello ends it.
    EXPECT_FALSE(m.feed(hello()));
}

TEST(relay_mux, a_resumed_relay_holds_no_more_than_a_hello_of_what_it_skips) {
    relay_mux m({}, /*resumed=*/true);
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(m.feed(std::string(4096, 'x')));
    EXPECT_FALSE(m.ready());
    ASSERT_TRUE(m.feed(hello() + ready()));
    EXPECT_TRUE(m.ready());
}

TEST(relay_mux, a_stream_opens_on_the_channel_it_was_accepted_on) {
    auto m = started();
    const auto id = m.open(2);
    EXPECT_EQ(id, 1u);
    const auto frames = drain(m);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].type, frame_type::open);
    EXPECT_EQ(frames[0].stream, 1u);
    EXPECT_EQ(frames[0].payload, std::string(1, '\x02'));
    EXPECT_EQ(m.open(5), 0u) << "there are five channels";
    EXPECT_EQ(m.open(-1), 0u);
    EXPECT_EQ(m.open(0), 2u) << "ids increase and are never reused";
}

TEST(relay_mux, bytes_cross_both_ways_and_credit_comes_back) {
    auto m = started();
    const auto id = m.open(0);
    drain(m);
    ASSERT_EQ(m.readable(id), max_data_bytes);
    m.local_data(id, "request");
    auto frames = drain(m);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].type, frame_type::data);
    EXPECT_EQ(frames[0].payload, "request");

    ASSERT_TRUE(m.feed(frame(frame_type::data, id, "reply")));
    EXPECT_EQ(m.to_local(id), "reply");
    m.local_written(id, 2);
    EXPECT_EQ(m.to_local(id), "ply");
    EXPECT_TRUE(drain(m).empty()) << "credit waits for a quarter window or an empty buffer";
    m.local_written(id, 3);
    frames = drain(m);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].type, frame_type::credit);
    EXPECT_EQ(read_u32(frames[0].payload), 5u);
}

TEST(relay_mux, a_client_may_send_only_its_window_until_credit_returns) {
    auto m = started();
    const auto id = m.open(0);
    drain(m);
    const std::string big(max_data_bytes, 'x');
    for (std::uint32_t sent = 0; sent < window_bytes; sent += max_data_bytes) {
        ASSERT_EQ(m.readable(id), max_data_bytes);
        m.local_data(id, big);
    }
    EXPECT_EQ(m.readable(id), 0u) << "the window is spent";
    drain(m);
    ASSERT_TRUE(m.feed(credit(id, 1000)));
    EXPECT_EQ(m.readable(id), 1000u);
}

TEST(relay_mux, a_sandbox_that_does_not_read_stops_the_clients_reading) {
    mux_limits limits;
    limits.soft_queue_bytes = 100;
    auto m = started(limits);
    const auto id = m.open(0);
    m.local_data(id, std::string(200, 'x'));
    EXPECT_EQ(m.readable(id), 0u);
    drain(m);
    EXPECT_GT(m.readable(id), 0u);
}

TEST(relay_mux, data_beyond_the_window_ends_the_relay) {
    auto m = started();
    const auto id = m.open(0);
    const std::string piece(max_data_bytes, 'x');
    for (std::uint32_t got = 0; got < window_bytes; got += max_data_bytes)
        ASSERT_TRUE(m.feed(frame(frame_type::data, id, piece)));
    EXPECT_FALSE(m.feed(frame(frame_type::data, id, "x")));
    EXPECT_EQ(m.error(), "data beyond the window on stream 1");
}

TEST(relay_mux, the_pending_bytes_for_a_slow_client_never_pass_the_window) {
    auto m = started();
    const auto id = m.open(0);
    const std::string piece(max_data_bytes, 'x');
    for (std::uint32_t got = 0; got < window_bytes; got += max_data_bytes)
        ASSERT_TRUE(m.feed(frame(frame_type::data, id, piece)));
    EXPECT_EQ(m.to_local(id).size(), window_bytes);
    m.local_written(id, window_bytes);
    const auto frames = drain(m);
    ASSERT_EQ(frames.size(), 2u);  // open, then the credit for everything written
    EXPECT_EQ(read_u32(frames[1].payload), window_bytes);
    EXPECT_TRUE(m.feed(frame(frame_type::data, id, piece))) << "the credit reopened the window";
}

TEST(relay_mux, credit_beyond_what_was_sent_ends_the_relay) {
    auto m = started();
    const auto id = m.open(0);
    EXPECT_FALSE(m.feed(credit(id, 1)));
    EXPECT_EQ(m.error(), "credit of 1 beyond the window on stream 1");
    auto z = started();
    const auto zid = z.open(0);
    z.local_data(zid, "abc");
    EXPECT_FALSE(z.feed(credit(zid, 0)));
}

TEST(relay_mux, the_sandbox_may_not_open_streams_or_name_unopened_ones) {
    auto a = started();
    EXPECT_FALSE(a.feed(frame(frame_type::open, 1, std::string(1, '\0'))));
    EXPECT_EQ(a.error(), "the sandbox side may not open streams");
    auto b = started();
    EXPECT_FALSE(b.feed(frame(frame_type::data, 1, "x")));
    EXPECT_EQ(b.error(), "data for stream 1, which was never opened");
    auto c = started();
    EXPECT_FALSE(c.feed(hello()));
    auto d = started();
    EXPECT_FALSE(d.feed(ready()));
    EXPECT_EQ(d.error(), "a second ready");
}

TEST(relay_mux, late_frames_for_a_closed_stream_are_dropped) {
    auto m = started();
    const auto id = m.open(0);
    m.local_closed(id);
    const auto frames = drain(m);
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(frames[1].type, frame_type::close);
    EXPECT_TRUE(m.feed(frame(frame_type::data, id, "late") + credit(id, 5) + frame(frame_type::close, id)));
    EXPECT_FALSE(m.has_stream(id));
}

TEST(relay_mux, a_close_from_the_sandbox_waits_for_the_clients_bytes) {
    auto m = started();
    const auto id = m.open(0);
    ASSERT_TRUE(m.feed(frame(frame_type::data, id, "last words") + frame(frame_type::close, id)));
    EXPECT_TRUE(m.take_finished().empty());
    EXPECT_EQ(m.readable(id), 0u) << "nothing more is read for a closed stream";
    m.local_written(id, 10);
    EXPECT_EQ(m.take_finished(), std::vector<std::uint32_t>{id});
    EXPECT_FALSE(m.has_stream(id));
    drain(m);
    m.local_closed(id);
    EXPECT_TRUE(drain(m).empty()) << "no close goes back for a stream the sandbox closed";
}

TEST(relay_mux, streams_are_limited) {
    mux_limits limits;
    limits.max_streams = 2;
    auto m = started(limits);
    EXPECT_NE(m.open(0), 0u);
    const auto second = m.open(1);
    EXPECT_NE(second, 0u);
    EXPECT_EQ(m.open(2), 0u);
    m.local_closed(second);
    EXPECT_NE(m.open(2), 0u);
}

TEST(relay_mux, a_sandbox_that_never_reads_is_ended_at_the_hard_limit) {
    mux_limits limits;
    limits.soft_queue_bytes = 1 << 20;
    limits.hard_queue_bytes = 64;
    auto m = started(limits);
    for (int i = 0; i < 4; ++i) m.local_closed(m.open(0));  // control frames only
    EXPECT_TRUE(m.failed());
    EXPECT_EQ(m.error(), "the sandbox side has not read its input for 64 bytes");
}

TEST(relay_mux, random_bytes_from_the_sandbox_never_crash_it) {
    // Deterministic noise, some of it after a valid start: every outcome is
    // "keep going" or "fail with a reason", never a crash or an unbounded buffer.
    std::uint32_t state = 12345;
    auto next = [&state] { return state = state * 1664525u + 1013904223u; };
    for (int round = 0; round < 2000; ++round) {
        relay_mux m;
        if (round % 2 == 0) {
            ASSERT_TRUE(m.feed(hello() + ready()));
            m.open(static_cast<int>(next() % channel_count));
        }
        std::string noise(1 + next() % 64, '\0');
        for (auto& c : noise) c = static_cast<char>(next() >> 24);
        if (round % 3 == 0) noise[0] = static_cast<char>(1 + next() % 6);  // a plausible type now and then
        if (!m.feed(noise)) EXPECT_FALSE(m.error().empty());
        EXPECT_LE(m.to_sandbox().size(), 64u);
    }
}
