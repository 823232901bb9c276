#include "messaging/json_peek.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace peek = cellgate::messaging::json_peek;
using nlohmann::json;

namespace {

std::vector<std::pair<std::string, std::string>> members(std::string_view text) {
    std::vector<std::pair<std::string, std::string>> out;
    const bool ok = peek::for_each_member(text, [&out](std::string_view k, std::string_view v) {
        out.emplace_back(k, v);
        return true;
    });
    if (!ok) out.emplace_back("<not an object>", "");
    return out;
}

}  // namespace

TEST(json_peek, lists_the_top_level_members_with_their_raw_values) {
    const auto m = members(R"( { "a" : 1 , "b":{"x":[1,{"y":"}"}]},"c":"q\"}" ,"d":[ ],"e":null,"f":-1.5e3} )");
    const std::vector<std::pair<std::string, std::string>> want = {
        {"a", "1"}, {"b", R"({"x":[1,{"y":"}"}]})"}, {"c", R"("q\"}")"}, {"d", "[ ]"}, {"e", "null"}, {"f", "-1.5e3"}};
    EXPECT_EQ(m, want);
    EXPECT_TRUE(members("{}").empty());
    EXPECT_TRUE(members(" {\n} ").empty());
}

TEST(json_peek, a_quote_after_escaped_backslashes_ends_the_string) {
    // "\\" is one backslash: the quote after it closes the string.
    const auto m = members(R"({"k":"a\\","l":"b\\\"c"})");
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0].second, R"("a\\")");
    EXPECT_EQ(m[1].second, R"("b\\\"c")");
}

TEST(json_peek, text_that_is_not_an_object_is_refused_without_reading_past_its_end) {
    for (const std::string bad : {"", "[1]", "\"s\"", "{", "{\"a\"", "{\"a\":", "{\"a\":\"x", "{\"a\":1,", "{\"a\" 1}",
                                  "{\"a\":{\"b\":1}", "{a:1}", "{\"a\":\"\\"}) {
        const auto m = members(bad);
        ASSERT_FALSE(m.empty()) << bad;
        EXPECT_EQ(m.back().first, "<not an object>") << bad;
    }
}

TEST(json_peek, the_last_of_repeated_keys_wins_as_in_a_parse) {
    const std::string text = R"({"data":{},"data":{"big":1},"name":"a"})";
    EXPECT_EQ(peek::member(text, "data").value(), R"({"big":1})");
    EXPECT_EQ(json::parse(text)["data"].dump(), R"({"big":1})");
    EXPECT_FALSE(peek::member(text, "missing").has_value());
}

TEST(json_peek, escaped_keys_and_strings_are_compared_unescaped) {
    const std::string text = R"({"na\u006de":"std\u0065rr","text\/plain":1})";
    EXPECT_EQ(peek::string_member(text, "name").value(), "stderr");
    EXPECT_TRUE(peek::member(text, "text/plain").has_value());
    EXPECT_FALSE(peek::string_member(R"({"name":5})", "name").has_value());
    EXPECT_FALSE(peek::string_member(R"({"name":"a very long name"})", "name", 4).has_value());
}

TEST(json_peek, decoded_size_agrees_with_a_parse) {
    for (const std::string body :
         {std::string("plain"), std::string(R"(tab\tquote\"slash\/back\\)"), std::string(R"(\u00e9\u20ac\ud83d\ude00)"),
          std::string("raw \xc3\xa9 utf-8"), std::string(R"(lone \ud800 surrogate)"), std::string(1000, 'y') + "\\n"}) {
        const auto parsed = json::parse("\"" + body + "\"", nullptr, false);
        const auto size = peek::decoded_size(body);
        ASSERT_TRUE(size.has_value()) << body;
        if (!parsed.is_discarded()) EXPECT_EQ(*size, parsed.get<std::string>().size()) << body;
        const auto decoded = peek::decode_string(body, 1 << 20);
        ASSERT_TRUE(decoded.has_value()) << body;
        EXPECT_EQ(decoded->size(), *size) << body;
        if (!parsed.is_discarded()) EXPECT_EQ(*decoded, parsed.get<std::string>()) << body;
    }
    EXPECT_FALSE(peek::decoded_size(R"(bad \x escape)").has_value());
    EXPECT_FALSE(peek::decoded_size(R"(short \u12)").has_value());
}
