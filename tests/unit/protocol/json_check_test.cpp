#include "cellgate/protocol/json_check.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

using cellgate::protocol::is_valid_json;

namespace {

// nlohmann refuses numbers that overflow a double (1e999); RFC 8259 and the
// browsers' JSON.parse take them. Everything else must agree.
bool reference(const std::string& text) {
    if (text.find('\0') != std::string::npos) return false;
    if (nlohmann::json::accept(text)) return true;
    try {
        const auto parsed = nlohmann::json::parse(text);
        (void)parsed;
    } catch (const nlohmann::json::parse_error&) {
        return false;
    } catch (const nlohmann::json::out_of_range& e) {  // 1e999: valid JSON, not a double
        return std::string(e.what()).find("number overflow") != std::string::npos;
    }
    return true;
}

const std::vector<std::string> seeds = {
    R"({})",
    R"({"a": [1, -2.5e+3, 0, true, false, null, "x"], "b": {"c": {}}})",
    R"({"msg_id": "0f3c", "msg_type": "stream", "content": {"name": "stdout", "text": "h\u00e9llo\n\t\"q\"\\"}})",
    R"(["\ud83d\ude00", "é", "日本", "😀", "\/"])",
    R"([[[[[]]]], {"": ""}, -0, 0.1, 1E5, 2e-7])",
    "  {\n\t\"k\" : [ 1 , 2 ]\r\n}  ",
    R"("just a string")",
    R"(12)",
};

}  // namespace

TEST(JsonCheck, AcceptsValidTexts) {
    for (const auto& s : seeds) EXPECT_TRUE(is_valid_json(s)) << s;
}

TEST(JsonCheck, RefusesInvalidTexts) {
    const std::vector<std::string> bad = {
        "", " ", "{", "}", "{]", "[}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[,1]", "{a:1}", "{'a':1}",
        "[01]", "[1.]", "[.5]", "[1e]", "[+1]", "[-]", "[tru]", "[nul]", "[True]", "{}{}", "{} x", "[\"\\x\"]",
        "[\"\\u12\"]", "[\"\\ud83d\"]", "[\"\\ude00\"]", "[\"\\ud83d\\u0041\"]", "[\"a\nb\"]", "[\"a\tb\"]",
        "[\"\x80\"]", "[\"\xc0\xaf\"]", "[\"\xe0\x80\xaf\"]", "[\"\xed\xa0\x80\"]", "[\"\xf4\x90\x80\x80\"]",
        "[\"\xf5\x80\x80\x80\"]", "[\"\xe6\x97\"]", std::string("{\"a\":\"b\0\"}", 10), std::string("{}\0", 3),
        "[\"unterminated", "[1 2]", "{\"a\" 1}",
    };
    for (const auto& s : bad) {
        EXPECT_FALSE(is_valid_json(s)) << s;
        EXPECT_FALSE(reference(s)) << "the test case itself is valid JSON: " << s;
    }
}

TEST(JsonCheck, RequireObject) {
    EXPECT_TRUE(is_valid_json(" {}", {.require_object = true}));
    EXPECT_FALSE(is_valid_json("[]", {.require_object = true}));
    EXPECT_FALSE(is_valid_json("\"{}\"", {.require_object = true}));
    EXPECT_FALSE(is_valid_json("1", {.require_object = true}));
}

TEST(JsonCheck, DepthIsBoundedWithoutRecursion) {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_FALSE(is_valid_json(deep));  // default bound: 10000
    EXPECT_TRUE(is_valid_json(deep, {.max_depth = 100000}));
    const std::string ok = std::string(500, '[') + std::string(500, ']');
    EXPECT_TRUE(is_valid_json(ok));
}

TEST(JsonCheck, LongStringsAtEveryAlignment) {
    // The word-at-a-time scan must stop on a special byte wherever it falls.
    for (std::size_t len = 0; len < 40; ++len) {
        for (const char special : {'"', '\\', '\n', '\x01', '\x7f'}) {
            for (std::size_t at = 0; at < len; ++at) {
                std::string body(len, 'a');
                body[at] = special;
                const std::string text = "[\"" + body + "\"]";
                EXPECT_EQ(is_valid_json(text), reference(text)) << text;
            }
        }
    }
    const std::string big = "{\"text\": \"" + std::string(1 << 20, 'x') + "\"}";
    EXPECT_TRUE(is_valid_json(big, {.require_object = true}));
}

// A small deterministic fuzz: mutate the seeds byte by byte and compare with
// nlohmann on every result (the libFuzzer targets do this at length).
TEST(JsonCheck, AgreesWithNlohmannOnMutations) {
    std::mt19937 rng(20261130);
    const std::string alphabet = "{}[]\":,\\ 0123456789.eE+-truefalsn\x80\xc3\xa9\xed\xf0\x9f\x98\x80ud\n\t";
    int checked = 0;
    for (int round = 0; round < 60000; ++round) {
        std::string s = seeds[rng() % seeds.size()];
        const int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits && !s.empty(); ++e) {
            const std::size_t at = rng() % s.size();
            switch (rng() % 3) {
            case 0: s[at] = alphabet[rng() % alphabet.size()]; break;
            case 1: s.erase(at, 1); break;
            default: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
            }
        }
        ASSERT_EQ(is_valid_json(s), reference(s)) << "input: " << s;
        ++checked;
    }
    EXPECT_EQ(checked, 60000);
}
