#include "config/gateway_config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

using namespace cellgate;

namespace {

config::gateway_config parse(std::vector<std::string> args) {
    args.insert(args.begin(), "cellgate");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return config::parse_config(static_cast<int>(argv.size()), argv.data(), nullptr);
}

}  // namespace

TEST(gateway_config, one_tenant_gets_a_share_of_the_kernels_by_default) {
    const auto c = parse({});
    EXPECT_EQ(c.manager.max_kernels, 64u);
    EXPECT_EQ(c.manager.max_kernels_per_tenant, 16u);
    EXPECT_EQ(parse({"--max-kernels-per-tenant", "3"}).manager.max_kernels_per_tenant, 3u);
    EXPECT_EQ(parse({"--max-kernels-per-tenant=0"}).manager.max_kernels_per_tenant, 0u);  // only the total
    EXPECT_EQ(parse({"--max-sessions-per-tenant", "5"}).manager.max_kernels_per_tenant, 5u);  // older name
}

TEST(gateway_config, config_file_tokens_carry_their_own_cap) {
    const auto file = std::filesystem::temp_directory_path() / ("cg-config-" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << R"({"tokens": [{"token": "t-aaaaaaaa", "tenant": "a", "max_sessions": 2},
                                          {"token": "t-bbbbbbbb", "tenant": "b"}]})";
    const auto c = parse({"--config", file.string()});
    ASSERT_EQ(c.tokens.size(), 2u);
    EXPECT_EQ(c.tokens[0].max_sessions, 2u);
    EXPECT_EQ(c.tokens[1].max_sessions, 0u);  // the default applies
    std::ofstream(file) << R"({"tokens": [{"token": "t-aaaaaaaa", "max_sessions": -1}]})";
    EXPECT_THROW(parse({"--config", file.string()}), config::config_error);
    std::filesystem::remove(file);
}

TEST(gateway_config, per_node_settings_reach_the_launcher) {
    const auto c = parse({"--cgroup-parent", "cellgate-b", "--uid-range-start", "500000000", "--uid-range-slots", "8"});
    EXPECT_EQ(c.launcher.cgroup_parent, "cellgate-b");
    EXPECT_EQ(c.launcher.host_id_base, 500000000u);
    EXPECT_EQ(c.launcher.max_slots, 8u);
    EXPECT_THROW(parse({"--uid-range-slots", "0"}), config::config_error);
    EXPECT_THROW(parse({"--uid-range-start", "x"}), config::config_error);
}
