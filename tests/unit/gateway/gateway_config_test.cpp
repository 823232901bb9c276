#include "config/gateway_config.hpp"
#include "parse_args.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

using namespace cellgate;

namespace {

using fixtures::parse;

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
    EXPECT_EQ(parse({}).launcher.runsc_platform, "auto");
    EXPECT_EQ(parse({"--runsc-platform", "ptrace"}).launcher.runsc_platform, "ptrace");
    EXPECT_THROW(parse({"--runsc-platform", "vmware"}), config::config_error);
    EXPECT_FALSE(parse({}).launcher.memory_merge);
    EXPECT_TRUE(parse({"--memory-merge", "on"}).launcher.memory_merge);
    EXPECT_THROW(parse({"--memory-merge", "yes"}), config::config_error);
    EXPECT_FALSE(parse({}).launcher.zygote);
    EXPECT_TRUE(parse({"--zygote", "on"}).launcher.zygote);
    EXPECT_THROW(parse({"--zygote", "yes"}), config::config_error);
}

TEST(gateway_config, a_kernelspec_names_its_start_timeout) {
    const auto file = std::filesystem::temp_directory_path() / ("cg-start-" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << R"({"kernelspecs": {"python3": {}, "slow": {"start_timeout_s": 15}}})";
    const auto c = parse({"--config", file.string()});
    const auto spec_of = [&](const char* name) {
        return *std::find_if(c.kernelspecs.begin(), c.kernelspecs.end(), [&](const auto& k) { return k.name == name; });
    };
    EXPECT_EQ(spec_of("python3").to_sandbox_spec("k", {}).start_timeout, std::chrono::seconds(30));
    EXPECT_EQ(spec_of("slow").to_sandbox_spec("k", {}).start_timeout, std::chrono::seconds(15));
    for (const char* bad : {R"({"kernelspecs": {"slow": {"start_timeout_s": 0}}})",
                            R"({"kernelspecs": {"slow": {"start_timeout_s": 601}}})",
                            R"({"kernelspecs": {"slow": {"start_timeout_s": "15"}}})"}) {
        std::ofstream(file) << bad;
        EXPECT_THROW(parse({"--config", file.string()}), config::config_error) << bad;
    }
    std::filesystem::remove(file);
}

TEST(gateway_config, policies_per_surface_kernelspec_and_tenant) {
    using std::chrono::seconds;
    using cellgate::kernels::surface;
    const auto d = parse({});
    EXPECT_EQ(d.manager.policies.resolve(surface::jupyter, "python3", "a").exec_timeout, seconds(600));
    const auto cli = parse({"--jupyter-exec-timeout", "7", "--jupyter-output-limit", "4096", "--exec-timeout", "9",
                            "--cull-idle-timeout", "60"});
    EXPECT_EQ(cli.manager.policies.jupyter.exec_timeout, seconds(7));
    EXPECT_EQ(cli.manager.policies.jupyter.output_limit_bytes, 4096u);
    EXPECT_EQ(cli.manager.policies.jupyter.idle_timeout, seconds(60));
    EXPECT_EQ(cli.manager.policies.agent.exec_timeout, seconds(9));  // the /v1 default reaches the book

    const auto file = std::filesystem::temp_directory_path() / ("cg-policy-" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << R"({"kernelspecs": {"python3": {"policy": {"exec_timeout": 3, "output_limit": 1000}}},
                              "tokens": [{"token": "t-aaaaaaaa", "tenant": "lab", "policy": {"jupyter": {"exec_timeout": 0}}},
                                         {"token": "t-bbbbbbbb", "tenant": "bot"}]})";
    const auto c = parse({"--config", file.string()});
    EXPECT_EQ(c.manager.policies.resolve(surface::jupyter, "python3", "bot").exec_timeout, seconds(3));
    EXPECT_EQ(c.manager.policies.resolve(surface::jupyter, "python3", "lab").exec_timeout, seconds(0));
    EXPECT_EQ(c.manager.policies.resolve(surface::jupyter, "python3", "lab").output_limit_bytes, 1000u);

    const auto message_of = [&](const char* text) {
        std::ofstream(file) << text;
        try {
            parse({"--config", file.string()});
        } catch (const config::config_error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(message_of(R"({"kernelspecs": {"python3": {"policy": {"timeout": 3}}}})").find("kernelspecs.python3.policy"),
              std::string::npos);
    EXPECT_NE(message_of(R"({"tokens": [{"token": "t-aaaaaaaa", "tenant": "x", "policy": {"lifetime": 1}},
                                        {"token": "t-bbbbbbbb", "tenant": "x", "policy": {"lifetime": 2}}]})")
                  .find("more than one token entry"),
              std::string::npos);
    std::filesystem::remove(file);
}

TEST(gateway_config, the_command_line_token_is_the_operators_and_entries_say_so) {
    EXPECT_TRUE(parse({"--token", "op-token-1"}).tokens.at(0).is_operator);
    const auto file = std::filesystem::temp_directory_path() / ("cg-op-" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << R"({"tokens": [{"token": "t-aaaaaaaa", "tenant": "a", "operator": true},
                                          {"token": "t-bbbbbbbb", "tenant": "b"}]})";
    const auto c = parse({"--config", file.string()});
    EXPECT_TRUE(c.tokens.at(0).is_operator);
    EXPECT_FALSE(c.tokens.at(1).is_operator);
    std::ofstream(file) << R"({"tokens": [{"token": "t-aaaaaaaa", "tenant": "a", "operator": "yes"}]})";
    EXPECT_THROW(parse({"--config", file.string()}), config::config_error);
    std::filesystem::remove(file);
}

TEST(gateway_config, every_token_has_eight_characters_or_more) {
    EXPECT_THROW(parse({"--token", "short"}), config::config_error);
    EXPECT_NO_THROW(parse({"--token", "12345678"}));
    const auto file = std::filesystem::temp_directory_path() / ("cg-short-" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << R"({"tokens": [{"token": "abc", "tenant": "a"}]})";
    EXPECT_THROW(parse({"--config", file.string()}), config::config_error);
    std::filesystem::remove(file);
}

TEST(gateway_config, the_pool_may_grow_to_its_max_and_a_node_tag_is_checked) {
    const auto c = parse({"--pool-size", "3"});
    EXPECT_EQ(c.manager.pool_size.at("python3"), 3u);
    EXPECT_TRUE(c.manager.pool_max.empty());  // the manager's default: 4 × the size
    const auto g = parse({"--pool-size", "3", "--pool-max", "10", "--pool-growth-window", "60"});
    EXPECT_EQ(g.manager.pool_max.at("python3"), 10u);
    EXPECT_EQ(g.manager.pool_growth_window, std::chrono::seconds(60));
    EXPECT_THROW(parse({"--pool-size", "3", "--pool-max", "2"}), config::config_error);
    // Other kernelspecs' pools: repeatable, 0 turns one off, a bad form is refused.
    const auto p = parse({"--pool", "ir=1", "--pool", "bash=2", "--pool", "python3=0"});
    EXPECT_EQ(p.manager.pool_size.at("ir"), 1u);
    EXPECT_EQ(p.manager.pool_size.at("bash"), 2u);
    EXPECT_EQ(p.manager.pool_size.count("python3"), 0u);
    for (const char* bad : {"ir", "=2", "ir=two"}) EXPECT_THROW(parse({"--pool", bad}), config::config_error) << bad;
    EXPECT_EQ(parse({"--node-tag", "0a1b2c3d"}).node_tag, "0a1b2c3d");
    EXPECT_EQ(parse({}).node_tag, "");
    EXPECT_THROW(parse({"--node-tag", "node1"}), config::config_error);
    EXPECT_THROW(parse({"--node-tag", "0A1B2C3D"}), config::config_error);
}

// Security review turn 3, M6: an operator's secret names its tenants (or "*"),
// and says whether plain HTTP and which methods; TRACE, TRACK and CONNECT never.
TEST(gateway_config, an_operator_secret_is_bound_to_its_tenants_tls_and_methods) {
    const auto file = std::filesystem::temp_directory_path() / ("cg-secrets-" + std::to_string(::getpid()) + ".json");
    auto with = [&](const std::string& entry) {
        std::ofstream(file) << R"({"egress_secrets": [)" + entry + "]}";
        return parse({"--config", file.string()});
    };
    const auto c = with(R"({"domain": "a.example", "bearer": "x", "tenants": ["alpha"]},
                           {"domain": "b.example", "header": "K", "value": "y", "tenants": "*", "plain_http": true,
                            "methods": ["GET", "POST"]})");
    ASSERT_EQ(c.network.headers.size(), 2u);
    const auto& a = c.network.headers[0];
    EXPECT_TRUE(a.for_tenant("alpha"));
    EXPECT_FALSE(a.for_tenant("beta"));
    EXPECT_TRUE(a.applies("a.example", 443, "GET", true));
    EXPECT_FALSE(a.applies("a.example", 80, "GET", false)) << "plain HTTP unless the entry allows it";
    for (const auto* m : {"TRACE", "TRACK", "CONNECT"}) EXPECT_FALSE(a.applies("a.example", 443, m, true)) << m;
    const auto& b = c.network.headers[1];
    EXPECT_TRUE(b.for_tenant("anyone"));
    EXPECT_TRUE(b.applies("b.example", 80, "POST", false));
    EXPECT_FALSE(b.applies("b.example", 80, "DELETE", false)) << "only the methods it names";
    for (const auto* bad : {R"({"domain": "a.example", "bearer": "x"})",
                            R"({"domain": "a.example", "bearer": "x", "tenants": []})",
                            R"({"domain": "a.example", "bearer": "x", "tenants": "alpha"})",
                            R"({"domain": "a.example", "bearer": "x", "tenants": "*", "methods": ["TRACE"]})",
                            R"({"domain": "a.example", "bearer": "x", "tenants": "*", "methods": ["get"]})",
                            R"({"domain": "a.example", "bearer": "x", "tenants": "*", "plain_http": "yes"})"})
        EXPECT_THROW(with(bad), config::config_error) << bad;
    std::filesystem::remove(file);
}
