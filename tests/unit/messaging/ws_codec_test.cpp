#include "messaging/ws_codec.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <random>

using namespace cellgate::messaging;
using nlohmann::json;

namespace {

// Keys in sorted order, so that the legacy protocol's re-serialisation gives
// back the same bytes.
const std::string header_text =
    R"({"date":"2026-01-01T00:00:00.000000Z","msg_id":"m-1","msg_type":"execute_request","session":"s-1","username":"u","version":"5.3"})";
const std::string content_text = R"json({"code":"print(1)","silent":false})json";

std::string u32be(std::uint32_t v) {
    std::string s;
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xffu));
    return s;
}

std::string u64le(std::uint64_t v) {
    std::string s;
    for (int i = 0; i < 8; ++i, v >>= 8) s.push_back(static_cast<char>(v & 0xffu));
    return s;
}

// A v1 frame built by hand from its parts (channel, four JSON parts, buffers),
// independent of encode_v1.
std::string v1_frame(const std::vector<std::string>& parts) {
    const std::uint64_t n = parts.size() + 1;
    std::string table = u64le(n);
    std::uint64_t offset = 8 * (1 + n);
    std::string body;
    for (const auto& p : parts) {
        table += u64le(offset);
        offset += p.size();
        body += p;
    }
    table += u64le(offset);
    return table + body;
}

std::vector<std::string> v1_parts(std::string chan = "shell") {
    return {std::move(chan), header_text, "{}", "{}", content_text};
}

// A legacy binary frame built by hand: the JSON part, then buffers.
std::string legacy_frame(const std::vector<std::string>& parts) {
    const auto nbufs = static_cast<std::uint32_t>(parts.size());
    std::string table = u32be(nbufs);
    std::uint32_t offset = 4 * (nbufs + 1);
    std::string body;
    for (const auto& p : parts) {
        table += u32be(offset);
        offset += static_cast<std::uint32_t>(p.size());
        body += p;
    }
    return table + body;
}

std::string legacy_text(const std::string& chan = "shell") {
    return R"({"channel":")" + chan + R"(","header":)" + header_text +
           R"(,"parent_header":{},"metadata":{},"content":)" + content_text + "}";
}

// A JSON object text of exactly `size` bytes.
std::string object_of_size(std::size_t size) {
    return R"({"k":")" + std::string(size - 8, 'x') + R"("})";
}

// A header of exactly `size` bytes, padded in its date field.
std::string header_of_size(std::size_t size) {
    const std::string head = R"({"msg_id":"m-9","msg_type":"status","session":"s","date":")";
    const std::string tail = R"("})";
    return head + std::string(size - head.size() - tail.size(), '0') + tail;
}

void expect_error(const decode_result& r) {
    EXPECT_FALSE(r.ok);
    EXPECT_FALSE(r.error.empty());
}

outgoing_view view_of(channel c, const std::vector<std::string>* buffers = nullptr) {
    outgoing_view v{};
    v.chan = c;
    v.header = header_text;
    v.parent_header = "{}";
    v.metadata = "{}";
    v.content = content_text;
    v.buffers = buffers;
    v.msg_id = "m-1";
    v.msg_type = "execute_request";
    return v;
}

}  // namespace

// ---------------------------------------------------------------- channels

TEST(ws_codec_channel, names_round_trip) {
    for (const auto c : {channel::shell, channel::iopub, channel::stdin_, channel::control})
        EXPECT_EQ(channel_from(to_string(c)), c);
    EXPECT_EQ(to_string(channel::stdin_), "stdin");
    EXPECT_FALSE(channel_from("hb"));
    EXPECT_FALSE(channel_from(""));
    EXPECT_FALSE(channel_from("Shell"));
}

// ------------------------------------------------------- legacy text frames

TEST(ws_codec_json_text, decodes_a_jupyterlab_message) {
    const auto r = decode_json_text(legacy_text("control"));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.chan, channel::control);
    EXPECT_EQ(r.msg.header, header_text);
    EXPECT_EQ(r.msg.parent_header, "{}");
    EXPECT_EQ(r.msg.metadata, "{}");
    EXPECT_EQ(r.msg.content, content_text);
    EXPECT_EQ(r.msg.msg_id, "m-1");
    EXPECT_EQ(r.msg.msg_type, "execute_request");
    EXPECT_TRUE(r.msg.buffers.empty());
}

TEST(ws_codec_json_text, parts_come_out_compact) {
    const auto r = decode_json_text(
        R"( { "channel" : "stdin", "header" : { "msg_id" : "a", "msg_type" : "input_reply" },
              "content" : { "value" : "x y" } } )");
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.chan, channel::stdin_);
    EXPECT_EQ(r.msg.header, R"({"msg_id":"a","msg_type":"input_reply"})");
    EXPECT_EQ(r.msg.content, R"({"value":"x y"})");
}

TEST(ws_codec_json_text, missing_parts_default_to_empty_objects) {
    const auto r = decode_json_text(R"({"channel":"shell","header":{"msg_id":"","msg_type":"t"}})");
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.parent_header, "{}");
    EXPECT_EQ(r.msg.metadata, "{}");
    EXPECT_EQ(r.msg.content, "{}");
    EXPECT_EQ(r.msg.msg_id, "");
}

TEST(ws_codec_json_text, a_missing_channel_means_shell_as_in_jupyter_server) {
    const auto r = decode_json_text(R"({"header":{"msg_id":"a","msg_type":"t"}})");
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.chan, channel::shell);
}

TEST(ws_codec_json_text, accepts_an_empty_buffers_array) {
    const auto r = decode_json_text(
        R"({"channel":"shell","header":{"msg_id":"a","msg_type":"t"},"buffers":[]})");
    EXPECT_TRUE(r.ok) << r.error;
}

TEST(ws_codec_json_text, keeps_non_ascii_text) {
    const auto r = decode_json_text(
        "{\"channel\":\"shell\",\"header\":{\"msg_id\":\"\xc3\xa9\",\"msg_type\":\"t\"},"
        "\"content\":{\"code\":\"\xe2\x82\xac\"}}");
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.msg_id, "\xc3\xa9");
    EXPECT_EQ(r.msg.content, "{\"code\":\"\xe2\x82\xac\"}");
}

TEST(ws_codec_json_text, rejects_bad_messages) {
    const std::string h = R"("header":{"msg_id":"a","msg_type":"t"})";
    const std::vector<std::string> bad = {
        "",
        " ",
        "not json",
        "{",
        R"({"channel":"shell",)" + h,                        // truncated
        "[1,2,3]",                                            // array instead of object
        "\"shell\"",
        "null",
        R"({"channel":"shell"})",                            // no header
        R"({"channel":"shell","header":[]})",                // header an array
        R"({"channel":"shell","header":null})",
        R"({"channel":"shell","header":{"msg_type":"t"}})",  // no msg_id
        R"({"channel":"shell","header":{"msg_id":1,"msg_type":"t"}})",
        R"({"channel":"shell","header":{"msg_id":"a"}})",    // no msg_type
        R"({"channel":"shell","header":{"msg_id":"a","msg_type":""}})",
        R"({"channel":"shell","header":{"msg_id":"a","msg_type":7}})",
        R"({"channel":"shell",)" + h + R"(,"parent_header":[]})",
        R"({"channel":"shell",)" + h + R"(,"parent_header":null})",
        R"({"channel":"shell",)" + h + R"(,"metadata":"x"})",
        R"({"channel":"shell",)" + h + R"(,"content":[{}]})",
        R"({"channel":"shell",)" + h + R"(,"buffers":["AAEC"]})",  // bytes in a text frame
        R"({"channel":"shell",)" + h + R"(,"buffers":{}})",
        R"({"channel":7,)" + h + "}",
        R"({"channel":"hb",)" + h + "}",
        R"({"channel":"",)" + h + "}",
        "{\"channel\":\"shell\"," + h + ",\"content\":{\"code\":\"\xff\xfe\"}}",  // bad UTF-8
        "{\"channel\":\"shell\"," + h + ",\"content\":{\"code\":\"\xc3\"}}",      // cut UTF-8
        "{\"channel\":\"shell\"," + h + std::string("}\0", 2),          // trailing NUL
    };
    for (const auto& text : bad) {
        SCOPED_TRACE(text);
        expect_error(decode_json_text(text));
    }
}

TEST(ws_codec_json_text, iopub_from_a_client_is_an_error) {
    const auto r = decode_json_text(legacy_text("iopub"));
    expect_error(r);
    EXPECT_EQ(r.error, "clients cannot send on iopub");
}

TEST(ws_codec_json_text, an_unknown_channel_is_named_only_when_harmless) {
    EXPECT_EQ(decode_json_text(legacy_text("hb")).error, R"(unknown channel "hb")");
    const auto long_name = decode_json_text(legacy_text(std::string(1000, 'c')));
    expect_error(long_name);
    EXPECT_LT(long_name.error.size(), 64u);
    EXPECT_EQ(decode_json_text(legacy_text(R"(a\"b)")).error, "unknown channel");
}

TEST(ws_codec_json_text, rejects_a_frame_above_the_limit) {
    codec_limits limits;
    const std::string text = legacy_text();
    limits.max_frame_bytes = text.size();
    EXPECT_TRUE(decode_json_text(text, limits).ok);
    limits.max_frame_bytes = text.size() - 1;
    expect_error(decode_json_text(text, limits));
}

TEST(ws_codec_json_text, rejects_deep_nesting_without_overflowing_the_stack) {
    const std::size_t depth = 200000;
    const std::string text = R"({"channel":"shell","header":{"msg_id":"a","msg_type":"t"},"content":{"x":)" +
                             std::string(depth, '[') + std::string(depth, ']') + "}}";
    expect_error(decode_json_text(text));
    // Moderate nesting is fine, and brackets inside strings do not count.
    const std::string ok = R"({"channel":"shell","header":{"msg_id":"[[[[","msg_type":"t"},"content":{"x":)" +
                           std::string(100, '[') + std::string(100, ']') + "}}";
    EXPECT_TRUE(decode_json_text(ok).ok);
}

// ----------------------------------------------------- legacy binary frames

TEST(ws_codec_json_binary, decodes_two_buffers) {
    const std::string b1("\x00\x01\x02", 3);
    const std::string b2 = "second";
    const auto r = decode_json_binary(legacy_frame({legacy_text(), b1, b2}));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.chan, channel::shell);
    EXPECT_EQ(r.msg.header, header_text);
    EXPECT_EQ(r.msg.content, content_text);
    ASSERT_EQ(r.msg.buffers.size(), 2u);
    EXPECT_EQ(r.msg.buffers[0], b1);
    EXPECT_EQ(r.msg.buffers[1], b2);
}

TEST(ws_codec_json_binary, accepts_a_single_part_and_empty_buffers) {
    auto r = decode_json_binary(legacy_frame({legacy_text()}));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.msg.buffers.empty());

    r = decode_json_binary(legacy_frame({legacy_text(), "", ""}));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.buffers, (std::vector<std::string>{"", ""}));
}

TEST(ws_codec_json_binary, encode_json_lays_out_two_buffers_as_jupyter_server_does) {
    const std::vector<std::string> buffers = {std::string("\x00\x01\x02", 3), "abcd"};
    const auto f = encode_json(view_of(channel::iopub, &buffers));
    ASSERT_TRUE(f.binary);

    const std::string head = R"({"channel":"iopub","header":)" + header_text +
                             R"(,"parent_header":{},"metadata":{},"content":)" + content_text +
                             R"(,"msg_id":"m-1","msg_type":"execute_request"})";
    // nbufs = 3 (JSON + 2 buffers), so 4 words of table: 16 bytes.
    const auto o0 = 16u;
    const auto o1 = o0 + static_cast<std::uint32_t>(head.size());
    const auto o2 = o1 + 3u;
    const std::string expected = u32be(3) + u32be(o0) + u32be(o1) + u32be(o2) + head + buffers[0] + buffers[1];
    EXPECT_EQ(f.bytes, expected);
    EXPECT_TRUE(json::parse(head).is_object());
}

TEST(ws_codec_json_binary, rejects_bad_frames) {
    const std::string good = legacy_frame({legacy_text(), "buf"});
    const std::string json_part = legacy_text();
    const auto table_end = 4u * 3u;  // nbufs = 2
    const auto o1 = table_end + static_cast<std::uint32_t>(json_part.size());
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"empty", ""},
        {"short count", std::string("\x00\x00", 2)},
        {"zero parts", u32be(0)},
        {"zero parts with bytes", u32be(0) + u32be(8) + json_part},
        {"truncated table", u32be(2) + u32be(table_end)},
        {"huge count", u32be(0xffffffffu) + u32be(8)},
        {"wrong offset[0]", u32be(2) + u32be(table_end + 1) + u32be(o1) + " " + json_part + "buf"},
        {"offset[0] zero", u32be(2) + u32be(0) + u32be(o1) + json_part + "buf"},
        {"decreasing offsets", u32be(2) + u32be(table_end) + u32be(table_end - 1) + json_part + "buf"},
        {"offset past the end", u32be(2) + u32be(table_end) + u32be(0xfffffff0u) + json_part + "buf"},
        {"offset just past the end", u32be(2) + u32be(table_end) + u32be(o1 + 4) + json_part + "buf"},
        {"truncated JSON", good.substr(0, table_end + 10)},
        {"non-JSON part", legacy_frame({"hello", "buf"})},
        {"array part", legacy_frame({"[]", "buf"})},
        {"iopub", legacy_frame({legacy_text("iopub"), "buf"})},
        {"unknown channel", legacy_frame({legacy_text("nope"), "buf"})},
        {"no msg_id", legacy_frame({R"({"channel":"shell","header":{"msg_type":"t"}})"})},
        {"NUL then junk", legacy_frame({legacy_text() + std::string("\0junk", 5)})},
        {"invalid UTF-8", legacy_frame({"{\"channel\":\"shell\",\"header\":{\"msg_id\":\"\x80\",\"msg_type\":\"t\"}}"})},
    };
    for (const auto& [name, frame] : bad) {
        SCOPED_TRACE(name);
        expect_error(decode_json_binary(frame));
    }
}

TEST(ws_codec_json_binary, rejects_too_many_buffers) {
    codec_limits limits;
    limits.max_buffers = 2;
    EXPECT_TRUE(decode_json_binary(legacy_frame({legacy_text(), "a", "b"}), limits).ok);
    expect_error(decode_json_binary(legacy_frame({legacy_text(), "a", "b", "c"}), limits));
}

TEST(ws_codec_json_binary, rejects_a_frame_above_the_limit) {
    const std::string frame = legacy_frame({legacy_text(), "buf"});
    codec_limits limits;
    limits.max_frame_bytes = frame.size();
    EXPECT_TRUE(decode_json_binary(frame, limits).ok);
    limits.max_frame_bytes = frame.size() - 1;
    expect_error(decode_json_binary(frame, limits));
}

TEST(ws_codec_json_binary, binary_parts_win_over_a_buffers_key) {
    const std::string text = R"({"channel":"shell","header":{"msg_id":"a","msg_type":"t"},"buffers":[]})";
    const auto r = decode_json_binary(legacy_frame({text, "x"}));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.buffers, std::vector<std::string>{"x"});
}

// ------------------------------------------------------------------ legacy round trips

TEST(ws_codec_json_round_trip, text_without_buffers) {
    const std::vector<std::string> none;
    for (const std::vector<std::string>* bufs : {static_cast<const std::vector<std::string>*>(nullptr), &none}) {
        const auto f = encode_json(view_of(channel::shell, bufs));
        EXPECT_FALSE(f.binary);
        EXPECT_EQ(f.bytes, R"({"channel":"shell","header":)" + header_text +
                               R"(,"parent_header":{},"metadata":{},"content":)" + content_text +
                               R"(,"msg_id":"m-1","msg_type":"execute_request","buffers":[]})");
        const auto r = decode_json_text(f.bytes);
        ASSERT_TRUE(r.ok) << r.error;
        EXPECT_EQ(r.msg.chan, channel::shell);
        EXPECT_EQ(r.msg.header, header_text);
        EXPECT_EQ(r.msg.parent_header, "{}");
        EXPECT_EQ(r.msg.metadata, "{}");
        EXPECT_EQ(r.msg.content, content_text);
        EXPECT_EQ(r.msg.msg_id, "m-1");
        EXPECT_EQ(r.msg.msg_type, "execute_request");
    }
}

TEST(ws_codec_json_round_trip, binary_with_buffers) {
    const std::vector<std::string> buffers = {std::string("\x00\xff\x00", 3), "", std::string(70000, 'z')};
    const auto f = encode_json(view_of(channel::control, &buffers));
    ASSERT_TRUE(f.binary);
    const auto r = decode_json_binary(f.bytes);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.chan, channel::control);
    EXPECT_EQ(r.msg.header, header_text);
    EXPECT_EQ(r.msg.content, content_text);
    EXPECT_EQ(r.msg.buffers, buffers);
}

TEST(ws_codec_json_round_trip, escapes_msg_id_and_msg_type) {
    auto v = view_of(channel::iopub);
    v.msg_id = "a\"b\\c\n\x01";
    v.msg_type = "t\xc3\xa9";
    const auto f = encode_json(v);
    const auto j = json::parse(f.bytes, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << f.bytes;
    EXPECT_EQ(j["msg_id"], "a\"b\\c\n\x01");
    EXPECT_EQ(j["msg_type"], "t\xc3\xa9");
    EXPECT_EQ(j["channel"], "iopub");
    EXPECT_EQ(j["header"], json::parse(header_text));
    EXPECT_EQ(j["buffers"], json::array());
}

TEST(ws_codec_json_round_trip, splices_parts_as_they_are) {
    auto v = view_of(channel::iopub);
    v.content = R"({ "b" : 1,  "a" : 2 })";  // not re-serialised: spacing and order kept
    const auto f = encode_json(v);
    EXPECT_NE(f.bytes.find(R"("content":{ "b" : 1,  "a" : 2 },)"), std::string::npos) << f.bytes;
}

// ------------------------------------------------------------------ v1 frames

TEST(ws_codec_v1, encodes_the_reference_example_byte_for_byte) {
    const std::string header = header_of_size(100);
    const std::string content = object_of_size(30);
    ASSERT_EQ(header.size(), 100u);
    ASSERT_EQ(content.size(), 30u);
    outgoing_view v{};
    v.chan = channel::iopub;
    v.header = header;
    v.parent_header = "{}";
    v.metadata = "{}";
    v.content = content;
    v.msg_id = "m-9";
    v.msg_type = "status";

    const std::string bytes = encode_v1(v);
    ASSERT_EQ(bytes.size(), 195u);
    std::string expected = u64le(6);
    for (const std::uint64_t o : {56u, 61u, 161u, 163u, 165u, 195u}) expected += u64le(o);
    expected += "iopub" + header + "{}" + "{}" + content;
    EXPECT_EQ(bytes, expected);
}

TEST(ws_codec_v1, decodes_a_hand_built_frame) {
    auto parts = v1_parts("stdin");
    parts.emplace_back("\x00\x01", 2);
    parts.emplace_back("");
    const auto r = decode_v1(v1_frame(parts));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.chan, channel::stdin_);
    EXPECT_EQ(r.msg.header, header_text);
    EXPECT_EQ(r.msg.parent_header, "{}");
    EXPECT_EQ(r.msg.metadata, "{}");
    EXPECT_EQ(r.msg.content, content_text);
    EXPECT_EQ(r.msg.msg_id, "m-1");
    EXPECT_EQ(r.msg.msg_type, "execute_request");
    EXPECT_EQ(r.msg.buffers, (std::vector<std::string>{std::string("\x00\x01", 2), ""}));
}

TEST(ws_codec_v1, keeps_parts_byte_for_byte) {
    const std::string header = " {\"msg_type\" : \"t\",\n \"msg_id\":\"\\u00e9\"} ";
    const std::string content = "{ \"z\": 1, \"a\": [1.50, 2e3] }\n";
    const auto r = decode_v1(v1_frame({"control", header, "{ }", "{\"k\":{}}", content}));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.header, header);
    EXPECT_EQ(r.msg.parent_header, "{ }");
    EXPECT_EQ(r.msg.metadata, "{\"k\":{}}");
    EXPECT_EQ(r.msg.content, content);
    EXPECT_EQ(r.msg.msg_id, "\xc3\xa9");
}

// Found by ws_v1_fuzzer: v1 checks parts with protocol::is_valid_json, which
// takes numbers beyond a double's range as RFC 8259 and JSON.parse do, and
// passes them through; the legacy framing parses with nlohmann, which refuses
// them. Pinned here so that a change to either side is a decision.
TEST(ws_codec_v1, passes_numbers_the_legacy_framing_refuses) {
    const std::string content = R"({"a":[5.1e4003,null]})";
    const auto r = decode_v1(v1_frame({"control", R"({"msg_id":"a","msg_type":"t"})", "{}", "{}", content}));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.content, content);
    outgoing_view v{};
    v.chan = r.msg.chan;
    v.header = r.msg.header;
    v.parent_header = r.msg.parent_header;
    v.metadata = r.msg.metadata;
    v.content = r.msg.content;
    v.buffers = &r.msg.buffers;
    v.msg_id = r.msg.msg_id;
    v.msg_type = r.msg.msg_type;
    const auto legacy = decode_json_text(encode_json(v).bytes);
    EXPECT_FALSE(legacy.ok);
    EXPECT_EQ(legacy.error, "message is not valid JSON");
}

TEST(ws_codec_v1, ignores_bytes_after_the_last_offset) {
    const auto r = decode_v1(v1_frame(v1_parts()) + "trailing");
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.msg.content, content_text);
}

TEST(ws_codec_v1, round_trips_with_and_without_buffers) {
    const std::vector<std::string> buffers = {std::string("\x00\x01\x02", 3), "", std::string(100000, '\xfe')};
    for (const std::vector<std::string>* bufs : {static_cast<const std::vector<std::string>*>(nullptr), &buffers}) {
        const auto r = decode_v1(encode_v1(view_of(channel::shell, bufs)));
        ASSERT_TRUE(r.ok) << r.error;
        EXPECT_EQ(r.msg.chan, channel::shell);
        EXPECT_EQ(r.msg.header, header_text);
        EXPECT_EQ(r.msg.parent_header, "{}");
        EXPECT_EQ(r.msg.metadata, "{}");
        EXPECT_EQ(r.msg.content, content_text);
        EXPECT_EQ(r.msg.msg_id, "m-1");
        EXPECT_EQ(r.msg.msg_type, "execute_request");
        EXPECT_EQ(r.msg.buffers, bufs == nullptr ? std::vector<std::string>{} : buffers);
    }
}

TEST(ws_codec_v1, rejects_bad_offset_tables) {
    const std::string good = v1_frame(v1_parts());
    const std::string body = good.substr(56);
    const auto table = [](std::uint64_t n, std::vector<std::uint64_t> offsets) {
        std::string s = u64le(n);
        for (const auto o : offsets) s += u64le(o);
        return s;
    };
    const std::uint64_t end = good.size();
    const std::uint64_t o1 = 61;
    const std::uint64_t o2 = o1 + header_text.size();
    const std::uint64_t o3 = o2 + 2;
    const std::uint64_t o4 = o3 + 2;
    ASSERT_EQ(table(6, {56, o1, o2, o3, o4, end}) + body, good);
    constexpr std::uint64_t max64 = std::numeric_limits<std::uint64_t>::max();

    const std::vector<std::pair<std::string, std::string>> bad = {
        {"empty", ""},
        {"short count", std::string(7, '\x06')},
        {"count only", u64le(6)},
        {"zero offsets", u64le(0) + body},
        {"five offsets", table(5, {48, 53, 53 + header_text.size(), 55 + header_text.size(), end}) + body},
        {"2^64-1 offsets", table(max64, {56, o1, o2, o3, o4, end}) + body},
        {"2^63 offsets", table(std::uint64_t{1} << 63, {56, o1, o2, o3, o4, end}) + body},
        {"2^61 offsets (8*(1+n) wraps)", table((std::uint64_t{1} << 61) - 1, {0, o1, o2, o3, o4, end}) + body},
        {"truncated table", table(6, {56, o1, o2})},
        {"table longer than frame", table(7, {64, o1, o2, o3, o4, end})},
        {"wrong offset[0]", table(6, {48, o1, o2, o3, o4, end}) + body},
        {"offset[0] past table", table(6, {57, o1, o2, o3, o4, end}) + body},
        {"decreasing offsets", table(6, {56, o2, o1, o3, o4, end}) + body},
        {"last offset past the end", table(6, {56, o1, o2, o3, o4, end + 1}) + body},
        {"middle offset 2^64-1", table(6, {56, o1, max64, o3, o4, end}) + body},
        {"truncated body", good.substr(0, good.size() - 1)},
    };
    for (const auto& [name, frame] : bad) {
        SCOPED_TRACE(name);
        expect_error(decode_v1(frame));
    }
}

TEST(ws_codec_v1, rejects_bad_parts) {
    const auto with = [](std::size_t i, std::string part) {
        auto parts = v1_parts();
        parts[i] = std::move(part);
        return v1_frame(parts);
    };
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"iopub", with(0, "iopub")},
        {"unknown channel", with(0, "hb")},
        {"empty channel", with(0, "")},
        {"binary channel", with(0, std::string("\xff\x00", 2))},
        {"non-JSON header", with(1, "hello")},
        {"empty header", with(1, "")},
        {"array header", with(1, "[{}]")},
        {"header with trailing garbage", with(1, header_text + "x")},
        {"missing msg_id", with(1, R"({"msg_type":"t"})")},
        {"numeric msg_id", with(1, R"({"msg_id":5,"msg_type":"t"})")},
        {"missing msg_type", with(1, R"({"msg_id":"a"})")},
        {"empty msg_type", with(1, R"({"msg_id":"a","msg_type":""})")},
        {"array parent", with(2, "[]")},
        {"empty parent", with(2, "")},
        {"null metadata", with(3, "null")},
        {"string content", with(4, "\"{}\"")},
        {"array content", with(4, "[{}]")},
        {"truncated content", with(4, "{\"a\":")},
        {"invalid UTF-8 content", with(4, "{\"a\":\"\xc0\xaf\"}")},
        {"NUL then junk in content", with(4, std::string("{}\0junk", 7))},
        {"NUL then junk in header", with(1, header_text + std::string("\0]", 2))},
        {"NUL inside a string", with(4, std::string("{\"a\":\"\0\"}", 8))},
        {"invalid UTF-8 header", with(1, "{\"msg_id\":\"\xed\xa0\x80\",\"msg_type\":\"t\"}")},
    };
    for (const auto& [name, frame] : bad) {
        SCOPED_TRACE(name);
        expect_error(decode_v1(frame));
    }
}

TEST(ws_codec_v1, a_hostile_offset_number_cannot_overflow_the_table_size) {
    // With no buffer limit, only the table-fits check stands between a huge
    // offset_number and 8*(1+n) wrapping around to a small number.
    codec_limits limits;
    limits.max_buffers = std::numeric_limits<std::size_t>::max();
    const std::string body = v1_frame(v1_parts()).substr(8);
    for (const std::uint64_t n : {std::numeric_limits<std::uint64_t>::max(),
                                  (std::uint64_t{1} << 61) - 1, std::uint64_t{1} << 61,
                                  (std::uint64_t{1} << 63) - 1}) {
        SCOPED_TRACE(n);
        expect_error(decode_v1(u64le(n) + u64le(0) + body, limits));
    }
}

TEST(ws_codec_v1, iopub_from_a_client_is_an_error) {
    EXPECT_EQ(decode_v1(v1_frame(v1_parts("iopub"))).error, "clients cannot send on iopub");
}

TEST(ws_codec_v1, rejects_too_many_buffers) {
    codec_limits limits;
    limits.max_buffers = 2;
    auto parts = v1_parts();
    parts.insert(parts.end(), {"a", "b"});
    EXPECT_TRUE(decode_v1(v1_frame(parts), limits).ok);
    parts.emplace_back("c");
    const auto r = decode_v1(v1_frame(parts), limits);
    expect_error(r);
    EXPECT_EQ(r.error, "too many buffers");
}

TEST(ws_codec_v1, rejects_a_frame_above_the_limit) {
    const std::string frame = v1_frame(v1_parts());
    codec_limits limits;
    limits.max_frame_bytes = frame.size();
    EXPECT_TRUE(decode_v1(frame, limits).ok);
    limits.max_frame_bytes = frame.size() - 1;
    const auto r = decode_v1(frame, limits);
    expect_error(r);
    EXPECT_EQ(r.error, "frame too large");
}

// ------------------------------------------------------------------ robustness

TEST(ws_codec_robustness, every_truncated_v1_frame_is_an_error) {
    auto parts = v1_parts();
    parts.emplace_back("buffer");
    const std::string frame = v1_frame(parts);
    for (std::size_t keep = 0; keep < frame.size(); ++keep) {
        SCOPED_TRACE(keep);
        expect_error(decode_v1(frame.substr(0, keep)));
    }
}

TEST(ws_codec_robustness, a_truncated_legacy_frame_never_crashes) {
    const std::string frame = legacy_frame({legacy_text(), "buffer"});
    const std::size_t last_part = frame.size() - 6;
    for (std::size_t keep = 0; keep < frame.size(); ++keep) {
        SCOPED_TRACE(keep);
        const auto r = decode_json_binary(frame.substr(0, keep));
        // Cutting into the last buffer only shortens it: it runs to the end.
        if (keep < last_part) expect_error(r);
        else EXPECT_TRUE(r.ok) << r.error;
    }
}

TEST(ws_codec_robustness, random_corruption_gives_an_error_or_a_message) {
    std::mt19937 rng(12345);
    auto parts = v1_parts();
    parts.emplace_back("buffer");
    const std::string v1 = v1_frame(parts);
    const std::string legacy = legacy_frame({legacy_text(), "buffer"});
    const std::string text = legacy_text();
    for (int round = 0; round < 3000; ++round) {
        for (const std::string* original : {&v1, &legacy, &text}) {
            std::string s = *original;
            const int flips = 1 + static_cast<int>(rng() % 4);
            for (int i = 0; i < flips; ++i)
                s[rng() % s.size()] = static_cast<char>(rng() & 0xffu);
            for (const auto& r : {decode_v1(s), decode_json_binary(s), decode_json_text(s)}) {
                if (r.ok) {
                    EXPECT_TRUE(r.error.empty());
                    EXPECT_NE(r.msg.chan, channel::iopub);
                    EXPECT_FALSE(r.msg.msg_type.empty());
                } else {
                    EXPECT_FALSE(r.error.empty());
                }
            }
        }
    }
}
