#include "kernels/policy.hpp"

#include <gtest/gtest.h>

using namespace cellgate::kernels;
using json = nlohmann::json;
using std::chrono::seconds;

TEST(policy_book, surfaces_have_their_own_defaults) {
    const policy_book book;
    const auto j = book.resolve(surface::jupyter, "python3", "alice");
    const auto a = book.resolve(surface::agent, "python3", "alice");
    EXPECT_EQ(j.exec_timeout, seconds(600));
    EXPECT_EQ(j.output_limit_bytes, 16u << 20);
    EXPECT_EQ(j.idle_timeout, seconds(0));
    EXPECT_EQ(a.exec_timeout, seconds(300));
    EXPECT_EQ(a.output_limit_bytes, 1u << 20);
}

TEST(policy_book, the_tenant_overrides_the_kernelspec_which_overrides_the_surface) {
    policy_book book;
    book.by_kernelspec["python3"] = policy_layer_from_json(
        json::parse(R"({"exec_timeout": 30, "output_limit": 1000, "agent": {"exec_timeout": 20}})"), "spec");
    book.by_tenant["lab"] = policy_layer_from_json(json::parse(R"({"jupyter": {"exec_timeout": 0}})"), "tenant");
    EXPECT_EQ(book.resolve(surface::jupyter, "python3", "bot").exec_timeout, seconds(30));
    EXPECT_EQ(book.resolve(surface::agent, "python3", "bot").exec_timeout, seconds(20));
    EXPECT_EQ(book.resolve(surface::jupyter, "python3", "lab").exec_timeout, seconds(0));  // none
    EXPECT_EQ(book.resolve(surface::agent, "python3", "lab").exec_timeout, seconds(20));
    EXPECT_EQ(book.resolve(surface::jupyter, "python3", "lab").output_limit_bytes, 1000u);
    // Another kernelspec keeps the surface's defaults.
    EXPECT_EQ(book.resolve(surface::jupyter, "r", "bot").exec_timeout, seconds(600));
}

TEST(policy_layer, bad_input_names_the_key) {
    const auto error_of = [](const char* text) {
        try {
            policy_layer_from_json(json::parse(text), "kernelspecs.python3.policy");
        } catch (const policy_error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(error_of(R"({"exec_timout": 3})").find("exec_timout"), std::string::npos);
    EXPECT_NE(error_of(R"({"exec_timeout": -3})").find("kernelspecs.python3.policy.exec_timeout"), std::string::npos);
    EXPECT_NE(error_of(R"({"output_limit": "big"})").find("bytes"), std::string::npos);
    EXPECT_NE(error_of(R"({"jupyter": 5})").find("jupyter"), std::string::npos);
    EXPECT_NE(error_of(R"({"jupyter": {"agent": {}}})").find("agent"), std::string::npos);  // one level only
    EXPECT_NE(error_of(R"([1])").find("object"), std::string::npos);
    EXPECT_EQ(error_of(R"({"lifetime": 0, "upload_limit": 5, "result_limit": 7, "idle_timeout": 9})"), "");
}
