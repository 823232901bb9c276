// A template as a tenant defines it and the plan its build runs
// (templates/definition.hpp): the strict parse of POST /v1/templates' body,
// the packages' expansion, and the layer keys that decide what is built
// again and what is reused.
#include "templates/definition.hpp"

#include "util/api_error.hpp"

#include <gtest/gtest.h>

#include <regex>

using namespace cellgate;
using nlohmann::json;
using templates::definition;
using templates::parse_definition;

namespace {

// What parse_definition throws for `body`: status 0 when it accepts it.
api_error refusal(const json& body, const templates::build_settings& settings = {}) {
    try {
        parse_definition(body, settings);
    } catch (const api_exception& e) {
        return {e.status(), e.what()};
    }
    return {0, "accepted"};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

definition parsed(const json& body, const templates::build_settings& settings = {}) {
    return parse_definition(body, settings);
}

templates::step run(std::string command, bool force = false) { return {"RUN", {std::move(command)}, force}; }

// A plan for tenant `tenant` over the python image, nonce "n1".
templates::plan plan_of(const definition& d, const std::string& tenant = "acme", const std::string& nonce = "n1") {
    return templates::make_plan(d, tenant, "python", "/images/python/current", {{"PATH", "/usr/bin"}}, nonce);
}

definition with_steps(std::vector<templates::step> steps) {
    definition d;
    d.name = "analytics";
    d.steps = std::move(steps);
    return d;
}

}  // namespace

// ---- parse_definition: names and tags ----

TEST(TemplateDefinition, a_name_with_a_tag_gives_both) {
    const auto d = parsed({{"name", "analytics:v1"}});
    EXPECT_EQ(d.name, "analytics");
    EXPECT_EQ(d.tag, "v1");
    EXPECT_EQ(d.base, "python");
    EXPECT_TRUE(d.steps.empty());
    EXPECT_FALSE(d.force);
}

TEST(TemplateDefinition, a_name_without_a_tag_is_latest) {
    const auto d = parsed({{"name", "analytics"}});
    EXPECT_EQ(d.name, "analytics");
    EXPECT_EQ(d.tag, "latest");
}

TEST(TemplateDefinition, a_tag_field_overrides_the_names_tag) {
    const auto d = parsed({{"name", "analytics:v1"}, {"tag", "v2.1_rc-1"}});
    EXPECT_EQ(d.name, "analytics");
    EXPECT_EQ(d.tag, "v2.1_rc-1");
}

TEST(TemplateDefinition, refuses_invalid_names) {
    for (const auto& name :
         std::vector<std::string>{"", "Analytics", "-analytics", "_analytics", "ana/lytics", "ana lytics", "ana.lytics",
                                  "analytics:", "analytics:.v1", "analytics:-v1", "analytics:v 1", "a:b:c",
                                  std::string(64, 'a')}) {
        const auto r = refusal({{"name", name}});
        EXPECT_EQ(r.status, 400u) << "name '" << name << "'";
        EXPECT_TRUE(contains(r.message, "a template's name is")) << r.message;
    }
    EXPECT_EQ(refusal({{"name", std::string(63, 'a')}}).status, 0u);
    EXPECT_EQ(refusal({{"name", "0-a_b"}}).status, 0u);
}

TEST(TemplateDefinition, refuses_a_missing_or_non_string_name) {
    const auto missing = refusal({{"tag", "v1"}});
    EXPECT_EQ(missing.status, 400u);
    EXPECT_EQ(missing.message, "a template needs a name");
    const auto number = refusal({{"name", 12}});
    EXPECT_EQ(number.status, 400u);
    EXPECT_EQ(number.message, "name must be a string");
}

TEST(TemplateDefinition, refuses_invalid_tags) {
    for (const auto& tag : std::vector<std::string>{"", ".v1", "-v1", "v 1", "v1;rm", "v1/x", std::string(65, 'a')}) {
        const auto r = refusal({{"name", "analytics"}, {"tag", tag}});
        EXPECT_EQ(r.status, 400u) << "tag '" << tag << "'";
    }
    EXPECT_EQ(refusal({{"name", "analytics"}, {"tag", std::string(64, 'a')}}).status, 0u);
}

TEST(TemplateDefinition, refuses_an_unknown_top_level_field_naming_it) {
    const auto r = refusal({{"name", "analytics"}, {"dockerfile", "FROM x"}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "a template has no field 'dockerfile'");
}

TEST(TemplateDefinition, refuses_a_body_that_is_not_an_object) {
    const auto r = refusal(json::array({"analytics"}));
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "a template must be an object");
}

// ---- parse_definition: steps ----

TEST(TemplateDefinition, parses_steps_in_order_with_their_force) {
    const auto d = parsed({{"name", "analytics"},
                           {"steps", {{{"type", "run"}, {"args", {"echo hi"}}},
                                      {{"type", "ENV"}, {"args", {"A", "1", "B_2", "two"}}},
                                      {{"type", "WORKDIR"}, {"args", {"/opt"}}},
                                      {{"type", "USER"}, {"args", {"user"}}},
                                      {{"type", "RUN"}, {"args", {"make", "1234"}}, {"force", true}}}}});
    ASSERT_EQ(d.steps.size(), 5u);
    EXPECT_EQ(d.steps[0].type, "RUN");  // upper-cased
    EXPECT_EQ(d.steps[0].args, std::vector<std::string>{"echo hi"});
    EXPECT_FALSE(d.steps[0].force);
    EXPECT_EQ(d.steps[1].type, "ENV");
    EXPECT_EQ(d.steps[1].args, (std::vector<std::string>{"A", "1", "B_2", "two"}));
    EXPECT_EQ(d.steps[2].type, "WORKDIR");
    EXPECT_EQ(d.steps[3].type, "USER");
    EXPECT_EQ(d.steps[4].args, (std::vector<std::string>{"make", "1234"}));
    EXPECT_TRUE(d.steps[4].force);
}

TEST(TemplateDefinition, refuses_an_unknown_step_type) {
    const auto r = refusal({{"name", "analytics"}, {"steps", {{{"type", "FROM"}, {"args", {"debian"}}}}}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "unknown step type 'FROM' (RUN, COPY, ENV, WORKDIR, USER)");
}

TEST(TemplateDefinition, a_copy_step_names_its_uploaded_archive) {
    const auto r = refusal({{"name", "analytics"}, {"steps", {{{"type", "COPY"}, {"args", {"a", "/b"}}}}}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_TRUE(contains(r.message, "'files' is the key it was uploaded under")) << r.message;
    const auto d = parsed({{"name", "analytics"},
                           {"steps", {{{"type", "COPY"}, {"args", {"app", "/srv/", "user", "0640"}}, {"files", "abcdef0123"}}}}});
    ASSERT_EQ(d.steps.size(), 1u);
    EXPECT_EQ(d.steps[0].files, "abcdef0123");
    EXPECT_TRUE(d.steps[0].digest.empty());  // the build finds it; a client never sets it
}

TEST(TemplateDefinition, refuses_a_copy_step_that_leaves_its_archive_or_names_bad_owners) {
    for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"../etc/passwd", "/x"}, "source"},
             {{"/etc/passwd", "/x"}, "source"},
             {{"a/../../b", "/x"}, "source"},
             {{"a"}, "args"},
             {{"a", ""}, "destination"},
             {{"a", "/x", "nobody"}, "USER"},
             {{"a", "/x", "", "0999"}, "octal"},
             {{"a", "/x", "", "rwx"}, "octal"}}) {
        const auto r = refusal({{"name", "analytics"}, {"steps", {{{"type", "COPY"}, {"args", args}, {"files", "abcdef0123"}}}}});
        EXPECT_EQ(r.status, 400u);
        EXPECT_TRUE(contains(r.message, says)) << args[0] << ": " << r.message;
    }
    const auto r = refusal({{"name", "a"}, {"steps", {{{"type", "COPY"}, {"args", {"a", "/b"}}, {"files", "../../x"}}}}});
    EXPECT_TRUE(contains(r.message, "[A-Za-z0-9_-]")) << r.message;
}

TEST(TemplateDefinition, refuses_a_run_step_with_a_bad_user) {
    for (const std::string user : {"nobody", "65536", "99999", "-1", "123456", ""}) {
        const auto r = refusal({{"name", "analytics"}, {"steps", {{{"type", "RUN"}, {"args", {"id", user}}}}}});
        EXPECT_EQ(r.status, 400u) << "user '" << user << "'";
        EXPECT_EQ(r.message, "USER '" + user + "' is not root, user or a uid below 65536");
    }
    for (const std::string user : {"root", "user", "kernel", "0", "65535"})
        EXPECT_EQ(refusal({{"name", "analytics"}, {"steps", {{{"type", "RUN"}, {"args", {"id", user}}}}}}).status, 0u)
            << "user '" << user << "'";
}

TEST(TemplateDefinition, refuses_a_run_step_without_a_command_or_with_three_args) {
    EXPECT_EQ(refusal({{"name", "a"}, {"steps", {{{"type", "RUN"}}}}}).status, 400u);
    EXPECT_EQ(refusal({{"name", "a"}, {"steps", {{{"type", "RUN"}, {"args", {""}}}}}}).message,
              "a RUN step's command is empty");
    EXPECT_EQ(refusal({{"name", "a"}, {"steps", {{{"type", "RUN"}, {"args", {"id", "root", "x"}}}}}}).message,
              "a RUN step's args are [command] or [command, user]");
}

TEST(TemplateDefinition, refuses_a_user_step_with_a_bad_user) {
    const auto r = refusal({{"name", "analytics"}, {"steps", {{{"type", "USER"}, {"args", {"www-data"}}}}}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "USER 'www-data' is not root, user or a uid below 65536");
}

TEST(TemplateDefinition, refuses_env_with_odd_args) {
    const auto r = refusal({{"name", "analytics"}, {"steps", {{{"type", "ENV"}, {"args", {"A", "1", "B"}}}}}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "an ENV step's args are name, value pairs");
}

TEST(TemplateDefinition, refuses_env_names_a_template_may_not_set) {
    for (const std::string name : {"CELLGATE_TOKEN", "CELLGATE_", "1A", "A-B", "A B", ""}) {
        const auto r = refusal({{"name", "analytics"}, {"steps", {{{"type", "ENV"}, {"args", {name, "x"}}}}}});
        EXPECT_EQ(r.status, 400u) << "ENV name '" << name << "'";
        EXPECT_EQ(r.message, "ENV name '" + name + "' is not a name a template may set");
    }
    EXPECT_EQ(refusal({{"name", "analytics"}, {"steps", {{{"type", "ENV"}, {"args", {"MY_CELLGATE_X", "x"}}}}}}).status, 0u);
}

TEST(TemplateDefinition, refuses_more_than_64_steps) {
    json steps = json::array();
    for (int i = 0; i < 64; ++i) steps.push_back({{"type", "RUN"}, {"args", {"true"}}});
    EXPECT_EQ(refusal({{"name", "analytics"}, {"steps", steps}}).status, 0u);
    steps.push_back({{"type", "RUN"}, {"args", {"true"}}});
    const auto r = refusal({{"name", "analytics"}, {"steps", steps}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "a template has at most 64 steps");
}

TEST(TemplateDefinition, counts_the_packages_steps_among_the_64) {
    json steps = json::array();
    for (int i = 0; i < 64; ++i) steps.push_back({{"type", "RUN"}, {"args", {"true"}}});
    const auto r = refusal({{"name", "analytics"}, {"packages", {{"pip", {"duckdb"}}}}, {"steps", steps}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "a template has at most 64 steps, packages included");
}

TEST(TemplateDefinition, refuses_an_unknown_field_in_a_step_and_a_non_boolean_force) {
    const auto field = refusal({{"name", "a"}, {"steps", {{{"type", "RUN"}, {"args", {"id"}}, {"user", "root"}}}}});
    EXPECT_EQ(field.status, 400u);
    EXPECT_EQ(field.message, "a step has no field 'user'");
    const auto force = refusal({{"name", "a"}, {"steps", {{{"type", "RUN"}, {"args", {"id"}}, {"force", "yes"}}}}});
    EXPECT_EQ(force.status, 400u);
    EXPECT_EQ(force.message, "a step's force is true or false");
}

// ---- parse_definition: packages ----

TEST(TemplateDefinition, packages_expand_to_apt_pip_npm_whatever_the_key_order) {
    const auto body = json::parse(R"({"name": "analytics",
        "packages": {"npm": ["@scope/pkg@1.2"], "pip": ["duckdb==1.1.3", "polars"], "apt": ["libpoppler-dev"]},
        "steps": [{"type": "RUN", "args": ["echo done"]}]})");
    const auto d = parsed(body);
    ASSERT_EQ(d.steps.size(), 4u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(d.steps[i].type, "RUN");
        ASSERT_EQ(d.steps[i].args.size(), 2u);
        EXPECT_EQ(d.steps[i].args[1], "root");
        EXPECT_FALSE(d.steps[i].force);
    }
    EXPECT_EQ(d.steps[0].args[0],
              "apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y "
              "--no-install-recommends 'libpoppler-dev' && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin");
    EXPECT_EQ(d.steps[1].args[0],
              "python3 -m pip install --no-cache-dir --break-system-packages --disable-pip-version-check "
              "--root-user-action=ignore 'duckdb==1.1.3' 'polars'");
    EXPECT_EQ(d.steps[2].args[0], "npm install -g --no-audit --no-fund --no-update-notifier '@scope/pkg@1.2' && rm -rf \"$(npm config get cache)\"");
    // The given steps follow the packages'.
    EXPECT_EQ(d.steps[3].args, std::vector<std::string>{"echo done"});
}

TEST(TemplateDefinition, a_manager_without_packages_makes_no_step) {
    const auto d = parsed({{"name", "analytics"}, {"packages", {{"apt", json::array()}, {"npm", {"left-pad"}}}}});
    ASSERT_EQ(d.steps.size(), 1u);
    EXPECT_EQ(d.steps[0].args[0], "npm install -g --no-audit --no-fund --no-update-notifier 'left-pad' && rm -rf \"$(npm config get cache)\"");
}

TEST(TemplateDefinition, the_npm_registry_is_the_npm_steps_registry) {
    const auto d = parsed({{"name", "web"}, {"packages", {{"npm", {"left-pad"}}, {"pip", {"duckdb"}}}}},
                          {.pip_index_url = {}, .npm_registry_url = "http://npm.lan/"});
    ASSERT_EQ(d.steps.size(), 2u);
    EXPECT_EQ(d.steps[1].args[0], "npm install -g --no-audit --no-fund --no-update-notifier --registry 'http://npm.lan/' 'left-pad' && rm -rf \"$(npm config get cache)\"");
    EXPECT_FALSE(contains(d.steps[0].args[0], "npm.lan")) << d.steps[0].args[0];
}

TEST(TemplateDefinition, the_pip_index_url_is_the_pip_steps_index) {
    const auto d = parsed({{"name", "analytics"}, {"packages", {{"pip", {"duckdb"}}, {"apt", {"curl"}}}}},
                          {.pip_index_url = "https://pypi.internal/simple"});
    ASSERT_EQ(d.steps.size(), 2u);
    EXPECT_EQ(d.steps[1].args[0],
              "python3 -m pip install --no-cache-dir --break-system-packages --disable-pip-version-check "
              "--root-user-action=ignore --index-url 'https://pypi.internal/simple' 'duckdb'");
    EXPECT_FALSE(contains(d.steps[0].args[0], "index-url")) << d.steps[0].args[0];
}

TEST(TemplateDefinition, a_plain_http_pip_index_is_a_trusted_host) {
    const auto pip_step = [](const std::string& url) {
        return parsed({{"name", "analytics"}, {"packages", {{"pip", {"duckdb"}}}}}, {.pip_index_url = url}).steps.at(0).args.at(0);
    };
    EXPECT_EQ(pip_step("http://mirror.lan:8080/simple"),
              "python3 -m pip install --no-cache-dir --break-system-packages --disable-pip-version-check "
              "--root-user-action=ignore --index-url 'http://mirror.lan:8080/simple' --trusted-host 'mirror.lan' 'duckdb'");
    EXPECT_TRUE(contains(pip_step("http://mirror.lan/simple"), " --trusted-host 'mirror.lan' 'duckdb'"));
    EXPECT_FALSE(contains(pip_step("https://mirror.lan/simple"), "--trusted-host"));
}

TEST(TemplateDefinition, refuses_packages_that_are_options_or_shell) {
    for (const auto& [manager, package] : std::vector<std::pair<std::string, std::string>>{
             {"pip", "--index-url=http://evil"}, {"pip", "-e"}, {"apt", "curl;rm -rf /"}, {"npm", "a$(id)"},
             {"apt", "a b"}, {"pip", "x'y"}, {"npm", ""}}) {
        const auto r = refusal({{"name", "analytics"}, {"packages", {{manager, {package}}}}});
        EXPECT_EQ(r.status, 400u) << manager << " '" << package << "'";
        EXPECT_EQ(r.message, "'" + package + "' is not a " + manager + " package");
    }
}

TEST(TemplateDefinition, refuses_an_unknown_package_manager) {
    const auto r = refusal({{"name", "analytics"}, {"packages", {{"cargo", {"ripgrep"}}}}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "'packages' has no field 'cargo'");
}

// ---- parse_definition: from ----

TEST(TemplateDefinition, from_a_template_is_its_full_reference) {
    EXPECT_EQ(parsed({{"name", "analytics"}, {"from", {{"template", "base:v2"}}}}).base, "template:base:v2");
    EXPECT_EQ(parsed({{"name", "analytics"}, {"from", {{"template", "base"}}}}).base, "template:base:latest");
}

TEST(TemplateDefinition, from_an_image_is_its_name) {
    EXPECT_EQ(parsed({{"name", "analytics"}, {"from", {{"image", "python"}}}}).base, "python");
    EXPECT_EQ(parsed({{"name", "analytics"}, {"from", {{"image", "node"}}}}).base, "node");
}

TEST(TemplateDefinition, from_names_exactly_one_valid_base) {
    const auto two = refusal({{"name", "analytics"}, {"from", {{"image", "python"}, {"template", "base"}}}});
    EXPECT_EQ(two.status, 400u);
    EXPECT_TRUE(contains(two.message, "'from' names one base")) << two.message;
    EXPECT_EQ(refusal({{"name", "analytics"}, {"from", json::object()}}).status, 400u);
    EXPECT_EQ(refusal({{"name", "analytics"}, {"from", {{"registry", "docker.io"}}}}).message,
              "'from' has no field 'registry'");
    EXPECT_EQ(refusal({{"name", "analytics"}, {"from", "python"}}).message, "'from' must be an object");
    EXPECT_EQ(refusal({{"name", "analytics"}, {"from", {{"image", "../etc"}}}}).status, 400u);
    EXPECT_EQ(refusal({{"name", "analytics"}, {"from", {{"template", "Base"}}}}).status, 400u);
}

// ---- parse_definition: resources, kernel, commands, force ----

TEST(TemplateDefinition, parses_resources_kernel_and_force) {
    // Parsed from text, as the server's body is (its whole numbers unsigned).
    const auto d = parsed(json::parse(R"({"name": "analytics",
        "resources": {"cpu_millis": 1500, "memory_bytes": 536870912, "workspace_bytes": 1073741824},
        "kernel": {"language": "python", "preload": ["numpy", "pandas.io", "_x"], "pool": 3},
        "force": true})"));
    EXPECT_EQ(d.cpu_millis, std::optional<std::uint32_t>(1500));
    EXPECT_EQ(d.memory_bytes, std::optional<std::uint64_t>(536870912));
    EXPECT_EQ(d.workspace_bytes, std::optional<std::uint64_t>(1073741824));
    EXPECT_EQ(d.preload, (std::vector<std::string>{"numpy", "pandas.io", "_x"}));
    EXPECT_EQ(d.pool, 3u);
    EXPECT_TRUE(d.force);
}

TEST(TemplateDefinition, takes_a_start_command_and_a_ready_check) {
    const auto d = parsed({{"name", "analytics"}, {"start_cmd", "redis-server"}, {"ready_cmd", "redis-cli ping"}});
    EXPECT_EQ(d.start_cmd, std::optional<std::string>("redis-server"));
    EXPECT_EQ(d.ready_cmd, std::optional<std::string>("redis-cli ping"));
    EXPECT_FALSE(parsed({{"name", "a"}, {"start_cmd", ""}, {"ready_cmd", nullptr}}).start_cmd.has_value());
    EXPECT_EQ(refusal({{"name", "a"}, {"start_cmd", 3}}).status, 400u);
    EXPECT_EQ(refusal({{"name", "a"}, {"ready_cmd", std::string(70000, 'x')}}).status, 400u);
}

TEST(TemplateDefinition, leaves_unset_resources_unset) {
    const auto d = parsed({{"name", "analytics"}, {"resources", {{"memory_bytes", 1024u}}}});
    EXPECT_FALSE(d.cpu_millis.has_value());
    EXPECT_EQ(d.memory_bytes, std::optional<std::uint64_t>(1024));
    EXPECT_FALSE(d.workspace_bytes.has_value());
    EXPECT_EQ(d.pool, 0u);
    EXPECT_TRUE(d.preload.empty());
}

TEST(TemplateDefinition, refuses_a_kernel_language_other_than_python) {
    const auto r = refusal({{"name", "analytics"}, {"kernel", {{"language", "r"}}}});
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(r.message, "kernel.language: this gateway's templates run Python kernels");
}

TEST(TemplateDefinition, refuses_bad_resources_pool_and_preload) {
    EXPECT_EQ(refusal({{"name", "a"}, {"resources", {{"cpu_millis", 0u}}}}).message,
              "resources.cpu_millis must be a positive whole number");
    EXPECT_EQ(refusal({{"name", "a"}, {"resources", {{"memory_bytes", -1}}}}).status, 400u);
    EXPECT_EQ(refusal({{"name", "a"}, {"resources", {{"memory_bytes", 1.5}}}}).status, 400u);
    EXPECT_EQ(refusal({{"name", "a"}, {"resources", {{"gpus", 1}}}}).message, "'resources' has no field 'gpus'");
    EXPECT_EQ(refusal({{"name", "a"}, {"kernel", {{"pool", 5u}}}}).message, "kernel.pool is 0 to 4 warm sandboxes");
    EXPECT_EQ(refusal({{"name", "a"}, {"kernel", {{"pool", 4u}}}}).status, 0u);
    EXPECT_EQ(refusal({{"name", "a"}, {"kernel", {{"preload", {"os; import x"}}}}}).status, 400u);
    EXPECT_EQ(refusal({{"name", "a"}, {"force", "yes"}}).message, "force is true or false");
}

// ---- make_plan ----

TEST(TemplatePlan, run_steps_make_a_chain_of_layers) {
    const auto p = plan_of(with_steps({run("apt-get install -y curl"), {"ENV", {"A", "1"}}, run("make")}));
    const std::regex hex48("[0-9a-f]{48}");
    ASSERT_EQ(p.layers.size(), 2u);
    ASSERT_EQ(p.steps.size(), 3u);
    const auto& first = p.steps[0].spec;
    const auto& second = p.steps[2].spec;
    EXPECT_TRUE(std::regex_match(first.layer, hex48)) << first.layer;
    EXPECT_TRUE(std::regex_match(second.layer, hex48)) << second.layer;
    EXPECT_NE(first.layer, second.layer);
    EXPECT_EQ(p.layers, (std::vector<std::string>{first.layer, second.layer}));
    EXPECT_EQ(first.parent, "python");
    EXPECT_EQ(second.parent, "l-" + first.layer);
    EXPECT_EQ(p.image, "l-" + second.layer);
    EXPECT_TRUE(p.steps[0].makes_layer);
    EXPECT_FALSE(p.steps[1].makes_layer);
    EXPECT_TRUE(p.steps[2].makes_layer);
    EXPECT_EQ(p.steps[1].spec.layer, "");
    EXPECT_EQ(first.argv, (std::vector<std::string>{"/bin/sh", "-c", "apt-get install -y curl"}));
    EXPECT_EQ(p.steps[0].index, 0u);
    EXPECT_EQ(p.steps[2].index, 2u);
    EXPECT_EQ(p.steps[0].type, "RUN");
    EXPECT_EQ(p.steps[0].summary, "RUN apt-get install -y curl");
    EXPECT_EQ(p.steps[1].summary, "ENV A 1");
}

TEST(TemplatePlan, a_copy_step_is_keyed_by_its_archives_digest_not_the_clients_key) {
    auto d = with_steps({run("make"), {"COPY", {"app", "/srv/"}}});
    d.steps[1].files = "client-key-1";
    d.steps[1].digest = std::string(64, 'a');
    const auto a = plan_of(d);
    ASSERT_EQ(a.layers.size(), 2u);
    EXPECT_EQ(a.copies, (std::vector<std::size_t>{1}));
    EXPECT_EQ(a.steps[1].spec.uid, 0u);  // root places the files and sets their owner
    EXPECT_TRUE(contains(a.steps[1].spec.argv.back(), templates::copy_archive_path(1))) << a.steps[1].spec.argv.back();
    d.steps[1].files = "client-key-2";  // another key, the same bytes: the same layer
    EXPECT_EQ(plan_of(d).layers, a.layers);
    d.steps[1].digest = std::string(64, 'b');  // other bytes: a new layer from that step
    const auto b = plan_of(d);
    EXPECT_EQ(b.layers[0], a.layers[0]);
    EXPECT_NE(b.layers[1], a.layers[1]);
}

TEST(TemplatePlan, runs_on_a_template_base_image) {
    const auto base = "l-" + std::string(48, 'a');
    const auto p = templates::make_plan(with_steps({run("make")}), "acme", base, std::string(48, 'a'), {}, "n1");
    ASSERT_EQ(p.layers.size(), 1u);
    EXPECT_EQ(p.steps[0].spec.parent, base);
}

TEST(TemplatePlan, without_a_run_step_the_image_is_the_base) {
    const auto p = plan_of(with_steps({{"ENV", {"A", "1"}}, {"WORKDIR", {"/srv"}}}));
    EXPECT_EQ(p.image, "python");
    EXPECT_TRUE(p.layers.empty());
    EXPECT_EQ(p.env.at("A"), "1");
    EXPECT_EQ(p.env.at("PATH"), "/usr/bin");  // the base's
    EXPECT_EQ(p.workdir, "/srv");
}

TEST(TemplatePlan, the_same_definition_and_tenant_give_the_same_keys) {
    const auto d = with_steps({run("pip install duckdb"), {"ENV", {"A", "1"}}, run("make")});
    const auto a = plan_of(d), b = plan_of(d);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.image, b.image);
    // The nonce only counts from a forced step on.
    EXPECT_EQ(plan_of(d, "acme", "other-nonce").layers, a.layers);
}

TEST(TemplatePlan, another_tenant_gets_other_keys) {
    const auto d = with_steps({run("pip install duckdb"), run("make")});
    const auto a = plan_of(d, "acme"), b = plan_of(d, "globex");
    ASSERT_EQ(a.layers.size(), 2u);
    ASSERT_EQ(b.layers.size(), 2u);
    EXPECT_NE(a.layers[0], b.layers[0]);
    EXPECT_NE(a.layers[1], b.layers[1]);
}

TEST(TemplatePlan, another_base_identity_gives_other_keys) {
    const auto d = with_steps({run("make")});
    const auto a = templates::make_plan(d, "acme", "python", "/images/python/1", {}, "n1");
    const auto b = templates::make_plan(d, "acme", "python", "/images/python/2", {}, "n1");
    EXPECT_NE(a.layers.at(0), b.layers.at(0));
}

TEST(TemplatePlan, a_changed_second_run_keeps_the_first_key) {
    const auto a = plan_of(with_steps({run("pip install duckdb"), run("make")}));
    const auto b = plan_of(with_steps({run("pip install duckdb"), run("make all")}));
    ASSERT_EQ(a.layers.size(), 2u);
    ASSERT_EQ(b.layers.size(), 2u);
    EXPECT_EQ(a.layers[0], b.layers[0]);
    EXPECT_NE(a.layers[1], b.layers[1]);
}

TEST(TemplatePlan, a_changed_first_run_changes_every_key) {
    const auto a = plan_of(with_steps({run("pip install duckdb"), run("make")}));
    const auto b = plan_of(with_steps({run("pip install polars"), run("make")}));
    EXPECT_NE(a.layers.at(0), b.layers.at(0));
    EXPECT_NE(a.layers.at(1), b.layers.at(1));
}

TEST(TemplatePlan, env_before_a_run_changes_its_key) {
    const auto a = plan_of(with_steps({run("pip install duckdb"), run("make")}));
    const auto b = plan_of(with_steps({run("pip install duckdb"), {"ENV", {"CFLAGS", "-O2"}}, run("make")}));
    ASSERT_EQ(b.layers.size(), 2u);
    EXPECT_EQ(a.layers[0], b.layers[0]);
    EXPECT_NE(a.layers[1], b.layers[1]);
    EXPECT_EQ(b.steps[2].spec.env.at("CFLAGS"), "-O2");
    EXPECT_EQ(b.steps[2].spec.env.at("PATH"), "/usr/bin");
    EXPECT_EQ(b.steps[0].spec.env.count("CFLAGS"), 0u);
}

TEST(TemplatePlan, env_after_the_last_run_changes_no_key_but_the_plans_env) {
    const auto a = plan_of(with_steps({run("pip install duckdb"), run("make")}));
    const auto b = plan_of(with_steps({run("pip install duckdb"), run("make"), {"ENV", {"MODE", "prod", "PATH", "/opt/bin"}}}));
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.image, b.image);
    EXPECT_EQ(a.env, (std::map<std::string, std::string>{{"PATH", "/usr/bin"}}));
    EXPECT_EQ(b.env, (std::map<std::string, std::string>{{"MODE", "prod"}, {"PATH", "/opt/bin"}}));
}

TEST(TemplatePlan, workdir_is_relative_to_the_one_before) {
    const auto p = plan_of(with_steps({{"WORKDIR", {"/opt"}}, {"WORKDIR", {"x"}}, run("make")}));
    EXPECT_EQ(p.workdir, "/opt/x");
    EXPECT_EQ(p.steps[2].spec.cwd, "/opt/x");
    EXPECT_EQ(plan_of(with_steps({{"WORKDIR", {"/opt/x/"}}})).workdir, "/opt/x");
    EXPECT_EQ(plan_of(with_steps({{"WORKDIR", {"/opt"}}, {"WORKDIR", {"../srv"}}})).workdir, "/srv");
    EXPECT_EQ(plan_of(with_steps({{"WORKDIR", {"/opt"}}, {"WORKDIR", {"/srv"}}})).workdir, "/srv");
    EXPECT_EQ(plan_of(with_steps({})).workdir, "/");
}

TEST(TemplatePlan, workdir_changes_the_next_runs_key) {
    const auto a = plan_of(with_steps({run("make")}));
    const auto b = plan_of(with_steps({{"WORKDIR", {"/opt"}}, run("make")}));
    EXPECT_NE(a.layers.at(0), b.layers.at(0));
    EXPECT_EQ(a.steps[0].spec.cwd, "/");
}

TEST(TemplatePlan, user_sets_the_uid_of_the_runs_after_it) {
    const auto p = plan_of(with_steps({run("a"), {"USER", {"user"}}, run("b"), {"USER", {"1234"}}, run("c"),
                                       {"USER", {"root"}}, run("d"), run("e", false)}));
    ASSERT_EQ(p.layers.size(), 5u);
    EXPECT_EQ(p.steps[0].spec.uid, 0u);
    EXPECT_EQ(p.steps[2].spec.uid, 1000u);
    EXPECT_EQ(p.steps[2].spec.gid, 1000u);
    EXPECT_EQ(p.steps[4].spec.uid, 1234u);
    EXPECT_EQ(p.steps[4].spec.gid, 1234u);
    EXPECT_EQ(p.steps[6].spec.uid, 0u);
    EXPECT_EQ(p.user, "root");
}

TEST(TemplatePlan, a_runs_own_user_wins_over_user_steps) {
    const auto p = plan_of(with_steps({{"USER", {"user"}}, {"RUN", {"apt-get update", "root"}}, run("whoami")}));
    EXPECT_EQ(p.steps[1].spec.uid, 0u);
    EXPECT_EQ(p.steps[2].spec.uid, 1000u);
    EXPECT_EQ(p.user, "user");
}

TEST(TemplatePlan, user_changes_the_next_runs_key) {
    const auto a = plan_of(with_steps({run("make")}));
    const auto b = plan_of(with_steps({{"USER", {"user"}}, run("make")}));
    EXPECT_NE(a.layers.at(0), b.layers.at(0));
}

TEST(TemplatePlan, a_forced_step_changes_its_key_and_those_after_it) {
    const auto plain = plan_of(with_steps({run("a"), run("b"), run("c")}));
    const auto forced = plan_of(with_steps({run("a"), run("b", true), run("c")}));
    ASSERT_EQ(forced.layers.size(), 3u);
    EXPECT_EQ(forced.layers[0], plain.layers[0]);
    EXPECT_NE(forced.layers[1], plain.layers[1]);
    EXPECT_NE(forced.layers[2], plain.layers[2]);
    // With another nonce, another build: new layers again from the forced step on.
    const auto again = plan_of(with_steps({run("a"), run("b", true), run("c")}), "acme", "n2");
    EXPECT_EQ(again.layers[0], forced.layers[0]);
    EXPECT_NE(again.layers[1], forced.layers[1]);
    EXPECT_NE(again.layers[2], forced.layers[2]);
}

TEST(TemplatePlan, a_forced_definition_changes_every_key) {
    auto d = with_steps({run("a"), run("b")});
    const auto plain = plan_of(d);
    d.force = true;
    const auto forced = plan_of(d);
    ASSERT_EQ(forced.layers.size(), 2u);
    EXPECT_NE(forced.layers[0], plain.layers[0]);
    EXPECT_NE(forced.layers[1], plain.layers[1]);
    EXPECT_NE(plan_of(d, "acme", "n2").layers[0], forced.layers[0]);
}

TEST(TemplatePlan, a_long_summary_is_cut_at_200_bytes) {
    const auto p = plan_of(with_steps({run("echo " + std::string(300, 'x') + "\nmake")}));
    EXPECT_EQ(p.steps[0].summary.size(), 200u);
    EXPECT_EQ(p.steps[0].summary, "RUN echo " + std::string(188, 'x') + "...");
    EXPECT_EQ(plan_of(with_steps({run("a\nb")})).steps[0].summary, "RUN a b");
}

// ---- kernelspec_name ----

TEST(TemplateKernelspecName, differs_per_tenant_and_is_stable_per_tenant) {
    const auto a = templates::kernelspec_name("acme", "analytics", "v1");
    EXPECT_EQ(a, templates::kernelspec_name("acme", "analytics", "v1"));
    EXPECT_NE(a, templates::kernelspec_name("globex", "analytics", "v1"));
    EXPECT_NE(a, templates::kernelspec_name("acme", "analytics", "v2"));
    EXPECT_NE(a, templates::kernelspec_name("acme", "analytic", "v1"));
    // It names neither the tenant nor leaks it whole.
    EXPECT_FALSE(contains(a, "acme")) << a;
    EXPECT_TRUE(std::regex_match(a, std::regex("t[0-9a-f]{12}-.*"))) << a;
    EXPECT_TRUE(contains(a, "analytics")) << a;
}

// template_store keys its templates by this name: two templates of one tenant
// must never share it ('-' may be in a name and in a tag).
TEST(TemplateKernelspecName, tells_apart_a_dash_in_the_name_from_one_in_the_tag) {
    EXPECT_NE(templates::kernelspec_name("acme", "data-tools", "v1"), templates::kernelspec_name("acme", "data", "tools-v1"));
}

// ---- to_json ----

TEST(TemplateDefinition, to_json_shows_what_was_parsed) {
    const auto d = parsed({{"name", "analytics:v1"},
                           {"from", {{"template", "base:v2"}}},
                           {"steps", {{{"type", "ENV"}, {"args", {"A", "1"}}, {"force", true}}}},
                           {"resources", {{"cpu_millis", 500u}}},
                           {"kernel", {{"pool", 2u}}}});
    const auto j = templates::to_json(d);
    EXPECT_EQ(j["name"], "analytics");
    EXPECT_EQ(j["tag"], "v1");
    EXPECT_EQ(j["base"], "template:base:v2");
    EXPECT_EQ(j["steps"], json::parse(R"([{"type": "ENV", "args": ["A", "1"], "force": true}])"));
    EXPECT_EQ(j["resources"], json::parse(R"({"cpu_millis": 500})"));
    EXPECT_EQ(j["pool"], 2);
    EXPECT_FALSE(j.contains("start_cmd"));
}

TEST(TemplatePlan, a_forced_env_step_changes_the_keys_of_the_runs_after_it) {
    const json body = json::parse(R"({"name": "f", "steps": [{"type": "RUN", "args": ["a"]},
        {"type": "ENV", "args": ["K", "V"], "force": true}, {"type": "RUN", "args": ["b"]}]})");
    const auto d = templates::parse_definition(body, {});
    const auto once = templates::make_plan(d, "acme", "python", "image /x", {}, "n1");
    const auto twice = templates::make_plan(d, "acme", "python", "image /x", {}, "n2");
    EXPECT_EQ(once.layers.at(0), twice.layers.at(0));
    EXPECT_NE(once.layers.at(1), twice.layers.at(1));
}

// ---- parse_definition: one-shot runtimes ----

TEST(TemplateDefinition, runtimes_are_kept_checked_and_round_trip) {
    const json rt = {{"language", "zig"}, {"version", "0.11.0"}, {"aliases", {"ziglang"}},
                     {"compile", "exec zig build-exe \"$@\""}, {"run", "shift; exec ./binary \"$@\""}};
    const auto d = parsed({{"name", "zig"}, {"runtimes", {rt}}});
    ASSERT_EQ(d.runtimes.size(), 1u);
    EXPECT_EQ(d.runtimes[0], rt);
    EXPECT_EQ(templates::to_json(d)["runtimes"], d.runtimes);
    EXPECT_FALSE(templates::to_json(parsed({{"name", "plain"}})).contains("runtimes"));
    const auto interpreted = parsed({{"name", "awk"}, {"runtimes", {{{"language", "awk"}, {"version", "1"}, {"run", "exec awk -f \"$1\""}}}}});
    EXPECT_EQ(interpreted.runtimes[0]["aliases"], json::array());
    EXPECT_FALSE(interpreted.runtimes[0].contains("compile"));
}

TEST(TemplateDefinition, refuses_a_runtime_without_its_fields_or_with_bad_names) {
    auto refused = [](const json& runtimes) { return refusal({{"name", "t"}, {"runtimes", runtimes}}); };
    EXPECT_EQ(refused({{{"language", "zig"}, {"version", "1"}}}).message, "a runtime needs run");
    EXPECT_EQ(refused({{{"language", "zig"}, {"version", "1"}, {"run", ""}}}).message, "a runtime's run script is empty");
    EXPECT_TRUE(contains(refused({{{"language", "z g"}, {"version", "1"}, {"run", "x"}}}).message, "a runtime's language is 1 to 32"));
    EXPECT_TRUE(contains(refused({{{"language", "zig"}, {"version", "1/2"}, {"run", "x"}}}).message, "a runtime's version is"));
    EXPECT_TRUE(contains(refused({{{"language", "zig"}, {"version", "1"}, {"run", "x"}, {"aliases", {"a b"}}}}).message, "an alias is"));
    EXPECT_EQ(refused({{{"language", "zig"}, {"version", "1"}, {"run", "x"}, {"image", "y"}}}).message, "a runtime has no field 'image'");
    EXPECT_EQ(refused(json::array({json::object()}) ).status, 400u);
    json nine = json::array();
    for (int i = 0; i < 9; ++i) nine.push_back({{"language", "l" + std::to_string(i)}, {"version", "1"}, {"run", "x"}});
    EXPECT_EQ(refused(nine).message, "runtimes is a list of at most 8 runtimes");
}
