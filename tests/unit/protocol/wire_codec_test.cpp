#include "cellgate/protocol/wire_codec.hpp"

#include <gtest/gtest.h>

using namespace cellgate::protocol;

namespace {

const std::string key = "0123456789abcdef";

message sample() {
    auto m = make_message("execute_request", {{"code", "1+1"}}, "session-1");
    m.identities = {"client-a"};
    m.buffers = {std::string("\x00\x01\x02", 3)};
    return m;
}

std::vector<std::string> frames_of(const message& m) { return encode(m, hmac_signer(key)); }

// Builds frames by hand, signing whatever parts are given.
std::vector<std::string> signed_frames(const std::string& header, const std::string& parent,
                                       const std::string& metadata, const std::string& content) {
    hmac_signer s(key);
    return {std::string(delimiter), s.sign(header, parent, metadata, content), header, parent, metadata, content};
}

const std::string good_header =
    R"({"msg_id":"m1","msg_type":"status","session":"s","username":"u","version":"5.3","date":"2026-01-01T00:00:00Z"})";

}  // namespace

TEST(wire_codec, round_trips_a_message_with_identities_and_buffers) {
    const auto m = sample();
    auto d = decode(frames_of(m), hmac_signer(key));
    ASSERT_TRUE(d) << d.detail;
    EXPECT_EQ(d.msg.identities, m.identities);
    EXPECT_EQ(d.msg.header, m.header);
    EXPECT_EQ(d.msg.content, m.content);
    EXPECT_EQ(d.msg.buffers, m.buffers);
    EXPECT_EQ(d.fields.msg_type, "execute_request");
    EXPECT_EQ(d.fields.session, "session-1");
    EXPECT_EQ(d.fields.parent_msg_id, "");
}

TEST(wire_codec, reads_the_parent_msg_id) {
    auto m = make_message("stream", {{"name", "stdout"}, {"text", "x"}}, "s", "u",
                          R"({"msg_id":"parent-7","msg_type":"execute_request","session":"s","username":"u","version":"5.3"})");
    auto d = decode(frames_of(m), hmac_signer(key));
    ASSERT_TRUE(d);
    EXPECT_EQ(d.fields.parent_msg_id, "parent-7");
}

TEST(wire_codec, a_truncated_multipart_is_too_few_parts_not_a_crash) {
    auto frames = frames_of(sample());
    for (std::size_t keep = 0; keep < frames.size() - 1; ++keep) {
        std::vector<std::string> cut(frames.begin(), frames.begin() + static_cast<long>(keep));
        auto d = decode(std::move(cut), hmac_signer(key));
        EXPECT_FALSE(d) << "kept " << keep << " frames";
        EXPECT_TRUE(d.error == decode_error::no_delimiter || d.error == decode_error::too_few_parts ||
                    d.error == decode_error::bad_signature)
            << to_string(d.error);
    }
}

TEST(wire_codec, without_a_delimiter_it_is_refused) {
    auto d = decode({"a", "b", "c", "d", "e", "f"}, hmac_signer(key));
    EXPECT_EQ(d.error, decode_error::no_delimiter);
}

TEST(wire_codec, the_signature_is_checked_before_any_json_is_parsed) {
    // Unsigned garbage JSON: the error must be the signature, proving the parse never ran.
    std::vector<std::string> frames = {std::string(delimiter), std::string(64, 'a'), "{not json", "{}", "{}", "{}"};
    EXPECT_EQ(decode(std::move(frames), hmac_signer(key)).error, decode_error::bad_signature);
}

TEST(wire_codec, a_tampered_content_fails_the_signature) {
    auto frames = frames_of(sample());
    frames[6] = R"j({"code":"import os; os.system('rm -rf /')"})j";
    EXPECT_EQ(decode(std::move(frames), hmac_signer(key)).error, decode_error::bad_signature);
}

TEST(wire_codec, a_message_signed_with_another_key_is_refused) {
    auto frames = encode(sample(), hmac_signer("another key"));
    EXPECT_EQ(decode(std::move(frames), hmac_signer(key)).error, decode_error::bad_signature);
}

TEST(wire_codec, sizes_are_checked_before_the_signature) {
    decode_limits limits;
    limits.max_json_part_bytes = 100;
    limits.max_buffer_bytes = 100;
    auto frames = signed_frames(good_header, "{}", "{}", R"({"text":")" + std::string(200, 'x') + R"("})");
    frames[1] = "wrong";  // would fail the signature, but size comes first
    EXPECT_EQ(decode(std::move(frames), hmac_signer(key), limits).error, decode_error::frame_too_large);
}

TEST(wire_codec, the_total_size_is_limited) {
    decode_limits limits;
    limits.max_message_bytes = 1000;
    auto m = sample();
    m.buffers = {std::string(600, 'a'), std::string(600, 'b')};
    EXPECT_EQ(decode(frames_of(m), hmac_signer(key), limits).error, decode_error::message_too_large);
}

TEST(wire_codec, too_many_frames_are_refused) {
    decode_limits limits;
    limits.max_frames = 10;
    auto m = sample();
    m.buffers.assign(20, "b");
    EXPECT_EQ(decode(frames_of(m), hmac_signer(key), limits).error, decode_error::too_many_frames);
    m.buffers.clear();
    m.identities.assign(9, "id");
    limits.max_frames = 64;
    EXPECT_EQ(decode(frames_of(m), hmac_signer(key), limits).error, decode_error::too_many_frames);
}

TEST(wire_codec, signed_but_malformed_json_is_bad_json) {
    EXPECT_EQ(decode(signed_frames("{oops", "{}", "{}", "{}"), hmac_signer(key)).error, decode_error::bad_json);
    EXPECT_EQ(decode(signed_frames(good_header, "{}", "{}", "{\"a\":"), hmac_signer(key)).error,
              decode_error::bad_json);
    EXPECT_EQ(decode(signed_frames(good_header, "{}", "{}", "{\"s\":\"\xff\xfe\"}"), hmac_signer(key)).error,
              decode_error::bad_json)
        << "invalid UTF-8 must not get through";
}

TEST(wire_codec, a_nul_byte_in_a_signed_part_is_bad_json) {
    // The JSON parser would stop at the NUL and accept "{}" with junk behind it.
    const std::string content("{}\0junk", 7);
    EXPECT_EQ(decode(signed_frames(good_header, "{}", "{}", content), hmac_signer(key)).error, decode_error::bad_json);
    const std::string header_nul = good_header + std::string("\0", 1);
    EXPECT_EQ(decode(signed_frames(header_nul, "{}", "{}", "{}"), hmac_signer(key)).error, decode_error::bad_json);
}

TEST(wire_codec, signed_json_of_the_wrong_shape_is_a_schema_error) {
    EXPECT_EQ(decode(signed_frames("[1,2]", "{}", "{}", "{}"), hmac_signer(key)).error, decode_error::bad_schema);
    EXPECT_EQ(decode(signed_frames(good_header, "{}", "{}", "[]"), hmac_signer(key)).error, decode_error::bad_schema);
    EXPECT_EQ(decode(signed_frames(R"({"msg_id":1,"msg_type":"x","session":"s","username":"u","version":"5"})",
                                   "{}", "{}", "{}"),
                     hmac_signer(key))
                  .error,
              decode_error::bad_schema);
    EXPECT_EQ(decode(signed_frames(good_header, R"({"msg_type":"x"})", "{}", "{}"), hmac_signer(key)).error,
              decode_error::bad_schema)
        << "a non-empty parent header needs a msg_id";
}

TEST(wire_codec, encode_puts_the_delimiter_and_a_valid_signature_in_place) {
    const auto m = sample();
    const auto frames = frames_of(m);
    ASSERT_EQ(frames.size(), 1u + 1 + 1 + 4 + 1);
    EXPECT_EQ(frames[1], delimiter);
    EXPECT_TRUE(hmac_signer(key).verify(frames[2], frames[3], frames[4], frames[5], frames[6]));
}

TEST(message, make_message_fills_a_jupyter_header) {
    const auto m = make_message("kernel_info_request", nlohmann::json::object(), "sess");
    const auto h = nlohmann::json::parse(m.header);
    EXPECT_EQ(h.at("msg_type"), "kernel_info_request");
    EXPECT_EQ(h.at("session"), "sess");
    EXPECT_EQ(h.at("version"), "5.3");
    EXPECT_EQ(h.at("msg_id").get<std::string>().size(), 36u);
    EXPECT_EQ(h.at("date").get<std::string>().back(), 'Z');
    EXPECT_NE(make_uuid(), make_uuid());
}
