#include "cellgate/protocol/hmac_signer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

using cellgate::protocol::hmac_signer;

namespace {
// hmac.new(b"secret-key", b'{"a":1}' + b"{}" + b"{}" + b'{"b":2}', hashlib.sha256).hexdigest()
constexpr const char* reference = "ae76aeefcff0c221ecc815b72f45810b47290f404ee280ab6c161755f7ddc94b";
}  // namespace

TEST(hmac_signer, matches_python_reference_digest) {
    hmac_signer s("secret-key");
    EXPECT_EQ(s.sign(R"({"a":1})", "{}", "{}", R"({"b":2})"), reference);
}

TEST(hmac_signer, verifies_its_own_signature) {
    hmac_signer s("k");
    const auto sig = s.sign("h", "p", "m", "c");
    EXPECT_TRUE(s.verify(sig, "h", "p", "m", "c"));
}

TEST(hmac_signer, rejects_a_changed_part) {
    hmac_signer s("secret-key");
    EXPECT_FALSE(s.verify(reference, R"({"a":1})", "{}", "{}", R"({"b":3})"));
    EXPECT_FALSE(s.verify(reference, R"({"a":1})", "{}", R"({"x":0})", R"({"b":2})"));
}

TEST(hmac_signer, rejects_a_signature_of_the_wrong_length_or_alphabet) {
    hmac_signer s("secret-key");
    const std::string good = reference;
    EXPECT_FALSE(s.verify(good.substr(0, 63), R"({"a":1})", "{}", "{}", R"({"b":2})"));
    EXPECT_FALSE(s.verify(good + "0", R"({"a":1})", "{}", "{}", R"({"b":2})"));
    EXPECT_FALSE(s.verify("", R"({"a":1})", "{}", "{}", R"({"b":2})"));
    std::string not_hex = good;
    not_hex[10] = 'g';
    EXPECT_FALSE(s.verify(not_hex, R"({"a":1})", "{}", "{}", R"({"b":2})"));
}

TEST(hmac_signer, accepts_upper_case_hex) {
    hmac_signer s("secret-key");
    std::string upper = reference;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
    EXPECT_TRUE(s.verify(upper, R"({"a":1})", "{}", "{}", R"({"b":2})"));
}

TEST(hmac_signer, an_empty_key_disables_signing_and_accepts_only_empty_signatures) {
    hmac_signer s("");
    EXPECT_FALSE(s.enabled());
    EXPECT_EQ(s.sign("h", "p", "m", "c"), "");
    EXPECT_TRUE(s.verify("", "h", "p", "m", "c"));
    EXPECT_FALSE(s.verify(reference, "h", "p", "m", "c"));
}

TEST(hmac_signer, a_different_key_gives_a_different_digest) {
    EXPECT_NE(hmac_signer("a").sign("h", "p", "m", "c"), hmac_signer("b").sign("h", "p", "m", "c"));
}

TEST(make_kernel_key, is_64_hex_characters_and_random) {
    const auto a = cellgate::protocol::make_kernel_key();
    const auto b = cellgate::protocol::make_kernel_key();
    EXPECT_EQ(a.size(), 64u);
    EXPECT_NE(a, b);
    EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }));
}
