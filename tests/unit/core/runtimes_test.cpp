#include "core/runtimes.hpp"

#include <gtest/gtest.h>

namespace cellgate::core {
namespace {

TEST(version_matches, takes_the_selectors_pistons_clients_send) {
    EXPECT_TRUE(version_matches("3.11.2", "*"));
    EXPECT_TRUE(version_matches("3.11.2", ""));
    EXPECT_TRUE(version_matches("3.11.2", "3.11.2"));
    EXPECT_TRUE(version_matches("3.11.2", "3"));
    EXPECT_TRUE(version_matches("3.11.2", "3.11"));
    EXPECT_TRUE(version_matches("3.11.2", "3.x"));
    EXPECT_TRUE(version_matches("3.11.2", "3.11.*"));
    EXPECT_TRUE(version_matches("3.11.2", ">=3.10"));
    EXPECT_TRUE(version_matches("3.11.2", "^3.2.0"));
    EXPECT_TRUE(version_matches("3.11.2", "~3.11.0"));
    EXPECT_TRUE(version_matches("1.3.31", "1.3.31"));  // Debian's "1.3.31+ds1" is listed without its suffix
    EXPECT_FALSE(version_matches("3.11.2", "3.10"));
    EXPECT_FALSE(version_matches("3.11.2", "3.11.3"));
    EXPECT_FALSE(version_matches("3.11.2", "4"));
    EXPECT_FALSE(version_matches("3.11.2", "<3"));
    EXPECT_FALSE(version_matches("3.11.2", "^4.0.0"));
    EXPECT_FALSE(version_matches("3.11.2", "~3.10.0"));
    EXPECT_FALSE(version_matches("3.11.2", "three"));
    EXPECT_FALSE(version_matches("3.11.2", ">="));
}

TEST(runtime_table, finds_the_newest_by_language_or_alias_and_keeps_tenants_apart) {
    runtime_table t;
    t.add({.language = "python", .version = "3.9.1", .aliases = {"py"}, .run = "python3 \"$@\"", .kernelspec = "runs"});
    t.add({.language = "python", .version = "3.11.2", .aliases = {"py"}, .run = "python3 \"$@\"", .kernelspec = "runs"});
    t.add({.language = "zig", .version = "0.11.0", .run = "zig run \"$1\"", .kernelspec = "tpl-zig", .owner = "alpha"});
    EXPECT_EQ(t.find("beta", "PY", "*")->version, "3.11.2");
    EXPECT_EQ(t.find("beta", "python", "3.9")->version, "3.9.1");
    EXPECT_FALSE(t.find("beta", "python", "2"));
    EXPECT_FALSE(t.find("beta", "zig", "*"));
    EXPECT_EQ(t.find("alpha", "zig", "*")->kernelspec, "tpl-zig");
    EXPECT_EQ(t.list("beta").size(), 2u);
    EXPECT_EQ(t.list("beta").front().version, "3.11.2");  // newest first
    t.remove_kernelspec("tpl-zig");
    EXPECT_FALSE(t.find("alpha", "zig", "*"));
}

TEST(runtimes_from_json, reads_an_images_runtimes_and_refuses_a_wrong_one) {
    const auto rts = runtimes_from_json(nlohmann::json::parse(R"([
        {"language": "c", "version": "12.2.0", "aliases": ["gcc"], "runtime": "gcc",
         "compile": "gcc -o binary \"$@\"", "run": "shift; ./binary \"$@\""}])"), "runs");
    ASSERT_EQ(rts.size(), 1u);
    EXPECT_EQ(rts[0].toolchain, "gcc");
    EXPECT_EQ(rts[0].kernelspec, "runs");
    EXPECT_EQ(rts[0].aliases, std::vector<std::string>{"gcc"});
    EXPECT_THROW(runtimes_from_json(nlohmann::json::object(), "runs"), std::runtime_error);
    EXPECT_THROW(runtimes_from_json(nlohmann::json::parse(R"([{"language": "c", "version": "1"}])"), "runs"),
                 std::runtime_error);
    EXPECT_THROW(runtimes_from_json(nlohmann::json::parse(R"([{"language": "c", "version": "1", "run": "x", "aliases": "gcc"}])"), "runs"),
                 std::runtime_error);
}

}  // namespace
}  // namespace cellgate::core
