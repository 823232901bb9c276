#include "wire/zmtp_reader.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using cellgate::wire::zmtp_reader;
using verdict = zmtp_reader::verdict;

namespace {

std::string greeting(unsigned char major = 3, std::string mechanism = "NULL") {
    std::string g(64, '\0');
    g[0] = '\xff';
    g[9] = '\x7f';
    g[10] = static_cast<char>(major);
    g[11] = 1;
    mechanism.resize(20, '\0');
    g.replace(12, 20, mechanism);
    return g;
}

// One frame as libzmq writes it: the long form only when the size needs it,
// unless forced.
std::string frame(const std::string& body, bool more, bool command = false, bool force_long = false) {
    std::string f;
    const bool is_long = force_long || body.size() > 255;
    f += static_cast<char>((more ? 1 : 0) | (is_long ? 2 : 0) | (command ? 4 : 0));
    if (is_long) {
        for (int i = 7; i >= 0; --i) f += static_cast<char>((static_cast<std::uint64_t>(body.size()) >> (8 * i)) & 0xff);
    } else {
        f += static_cast<char>(body.size());
    }
    return f + body;
}

std::string message(const std::vector<std::string>& parts) {
    std::string out;
    for (std::size_t i = 0; i < parts.size(); ++i) out += frame(parts[i], i + 1 < parts.size());
    return out;
}

// A handshake and three messages: short and long sizes, an empty frame, a
// PING command between two messages, and a long-form size for a short body.
std::string sample_stream() {
    return greeting() + frame(std::string("\x05READY\x0bSocket-Type\0\0\0\x03PUB", 25), false, true) +
           message({"stream", "<IDS|MSG>", std::string(64, 's'), "{}", "", std::string(300, 'x')}) +
           frame("\x04PING\0\0", false, true) + message({"status"}) +
           frame("abc", false, false, true);
}

constexpr std::uint64_t sample_payload = 6 + 9 + 64 + 2 + 0 + 300 + 6 + 3;

zmtp_reader::limits small_limits() { return {8, 1024, 64}; }

}  // namespace

TEST(zmtp_reader, counts_messages_and_payload_split_at_every_offset) {
    const auto s = sample_stream();
    for (std::size_t cut = 0; cut <= s.size(); ++cut) {
        zmtp_reader r(small_limits());
        ASSERT_EQ(r.feed(std::string_view(s).substr(0, cut)), cut) << cut;
        ASSERT_EQ(r.feed(std::string_view(s).substr(cut)), s.size() - cut) << cut;
        ASSERT_EQ(r.status(), verdict::ok) << cut;
        EXPECT_EQ(r.messages(), 3u) << cut;
        EXPECT_EQ(r.payload_bytes(), sample_payload) << cut;
        EXPECT_EQ(r.partial_message_bytes(), 0u) << cut;
    }
}

TEST(zmtp_reader, byte_by_byte_tracks_the_partial_message) {
    const auto s = greeting() + message({"ab", "cde"});
    zmtp_reader r(small_limits());
    std::uint64_t max_partial = 0;
    for (char c : s) {
        ASSERT_EQ(r.feed(std::string_view(&c, 1)), 1u);
        max_partial = std::max(max_partial, r.partial_message_bytes());
    }
    EXPECT_EQ(max_partial, 5u);  // counted from the headers, before the bodies arrive
    EXPECT_EQ(r.messages(), 1u);
    EXPECT_EQ(r.partial_message_bytes(), 0u);
}

TEST(zmtp_reader, refuses_the_frame_past_max_frames_at_its_header) {
    std::vector<std::string> parts(9, "x");  // one more than allowed
    const auto s = greeting() + message(parts);
    zmtp_reader r(small_limits());
    const auto good = r.feed(s);
    EXPECT_EQ(r.status(), verdict::too_many_frames);
    EXPECT_EQ(good, 64u + 8 * 3 + 1);  // eight frames, then the ninth's flags byte
    EXPECT_EQ(r.feed("more"), 0u);
}

TEST(zmtp_reader, allows_max_frames_and_max_bytes_exactly) {
    zmtp_reader r(small_limits());
    const auto s = greeting() + message({std::string(1000, 'a'), std::string(24, 'b')}) +
                   message(std::vector<std::string>(8, "x"));
    EXPECT_EQ(r.feed(s), s.size());
    EXPECT_EQ(r.status(), verdict::ok);
    EXPECT_EQ(r.messages(), 2u);
}

TEST(zmtp_reader, refuses_a_message_past_max_bytes_before_its_body) {
    const auto head = greeting() + frame(std::string(1000, 'a'), true);
    const auto s = head + frame(std::string(25, 'b'), false);
    zmtp_reader r(small_limits());
    EXPECT_EQ(r.feed(s), head.size() + 1);  // the flags byte; the size byte tells
    EXPECT_EQ(r.status(), verdict::message_too_large);
}

TEST(zmtp_reader, refuses_a_huge_long_size_without_overflow) {
    std::string s = greeting() + "\x02" + std::string(8, '\xff');
    zmtp_reader r(small_limits());
    r.feed(s);
    EXPECT_EQ(r.status(), verdict::message_too_large);
}

TEST(zmtp_reader, bytes_split_across_messages_do_not_add_up) {
    // Many messages, each under the limit, never trip it together.
    std::string s = greeting();
    for (int i = 0; i < 100; ++i) s += message({std::string(600, 'm'), std::string(400, 'n')});
    zmtp_reader r(small_limits());
    EXPECT_EQ(r.feed(s), s.size());
    EXPECT_EQ(r.messages(), 100u);
}

TEST(zmtp_reader, commands_have_their_own_limit_and_no_more_flag) {
    {
        zmtp_reader r(small_limits());
        r.feed(greeting() + frame(std::string(65, 'c'), false, true));
        EXPECT_EQ(r.status(), verdict::command_too_large);
    }
    {
        zmtp_reader r(small_limits());
        r.feed(greeting() + "\x05\x01" + "c");
        EXPECT_EQ(r.status(), verdict::bad_flags);
    }
    {
        zmtp_reader r(small_limits());
        r.feed(greeting() + "\x08\x01" + "c");  // a reserved bit
        EXPECT_EQ(r.status(), verdict::bad_flags);
    }
    {
        // A command's body is not a message's: neither counted nor limited by max_message_bytes.
        zmtp_reader r({8, 10, 64});
        r.feed(greeting() + frame(std::string(60, 'c'), false, true));
        EXPECT_EQ(r.status(), verdict::ok);
        EXPECT_EQ(r.payload_bytes(), 0u);
        EXPECT_EQ(r.messages(), 0u);
    }
}

TEST(zmtp_reader, refuses_greetings_other_than_zmtp3_null) {
    const auto cases = {greeting(2), greeting(1), greeting(3, "PLAIN"), greeting(3, "CURVE"),
                        std::string("\x01\x00", 2) + std::string(62, '\0')};  // ZMTP 1.0: a length, not 0xFF
    for (const auto& g : cases) {
        zmtp_reader r(small_limits());
        EXPECT_LT(r.feed(g), g.size());
        EXPECT_EQ(r.status(), verdict::bad_greeting);
    }
    auto v1 = greeting();
    v1[9] = '\x7e';  // the signature's last byte without its low bit: ZMTP 1.0
    zmtp_reader r(small_limits());
    EXPECT_EQ(r.feed(v1), 9u);
    EXPECT_EQ(r.status(), verdict::bad_greeting);
}
