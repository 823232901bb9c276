// The option table is the one source: docs/configuration.md is printed from
// it, --help lists every option in it, and every option it describes parses
// as described.
#include "config/gateway_config.hpp"
#include "../test_paths.hpp"
#include "parse_args.hpp"
#include "config/options.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

using namespace cellgate;

namespace {

using fixtures::parse;

std::string message_of(const std::vector<std::string>& args) {
    try {
        parse(args);
    } catch (const config::config_error& e) {
        return e.what();
    }
    return "";
}

class temp_dir {
public:
    temp_dir() : path_(std::filesystem::temp_directory_path() / ("cg-reference-" + std::to_string(::getpid()))) {
        std::filesystem::create_directories(path_);
    }
    ~temp_dir() { std::filesystem::remove_all(path_); }
    std::filesystem::path file(const std::string& name, const std::string& text) const {
        const auto p = path_ / name;
        std::ofstream(p) << text;
        return p;
    }

private:
    std::filesystem::path path_;
};

// Options that only parse with a partner: every sample is given with these,
// on the command line and in the file alike.
const std::vector<std::pair<std::string, std::string>> partners = {
    {"node_tag", "0a1b2c3d"}, {"certfile", "/etc/cellgate/cert.pem"}, {"keyfile", "/etc/cellgate/key.pem"},
    {"etcd_ca", "/etc/cellgate/etcd/ca.pem"}, {"etcd_cert", "/etc/cellgate/etcd/node.pem"},
    {"etcd_key", "/etc/cellgate/etcd/node-key.pem"}, {"cluster_secret_file", "/etc/cellgate/cluster-secret"}};

// The variables the table's examples name (egress_secrets, tokens[].secrets).
void set_sample_environment() {
    ::setenv("EXAMPLE_KEY", "example-key", 1);
    ::setenv("LAB_API_TOKEN", "lab-api-token", 1);
}

}  // namespace

TEST(configuration_reference, docs_configuration_md_is_the_tables_output) {
    const std::string path = fixtures::configuration_md;
    const auto expected = config::configuration_reference();
    if (std::getenv("CELLGATE_UPDATE_GOLDEN") != nullptr) {
        std::ofstream(path) << expected;
        GTEST_SKIP() << "rewritten: " << path;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in) << "missing " << path;
    std::stringstream committed;
    committed << in.rdbuf();
    EXPECT_TRUE(committed.str() == expected)
        << path << " differs from the option table (gateway/src/config/option_table.cpp, file_entries.cpp). "
        << "Regenerate it: build/bin/cellgate --config-reference > docs/configuration.md "
        << "(or CELLGATE_UPDATE_GOLDEN=1 ctest -R configuration_reference), and commit it with the table.";
}

TEST(configuration_reference, help_lists_every_option) {
    const auto text = config::usage();
    for (const auto& o : config::options()) {
        const std::string spelled =
            o.kind == config::option_kind::file_only ? "\"" + std::string(o.name) + "\"" : config::command_line_name(o.name);
        // At the start of its own line, followed by its value or the line's end.
        const bool listed = text.find("\n  " + spelled + " ") != std::string::npos ||
                            text.find("\n  " + spelled + "\n") != std::string::npos;
        EXPECT_TRUE(listed) << spelled << " is missing from --help";
    }
    EXPECT_NE(text.find("docs/configuration.md"), std::string::npos);
    EXPECT_EQ(text.find('`'), std::string::npos) << "--help is plain text, without Markdown";
    EXPECT_NE(message_of({"--help"}).find("\n  --max-kernels N — default: 64\n"), std::string::npos);
}

TEST(configuration_reference, every_option_parses_from_the_command_line_and_a_config_file) {
    const temp_dir dir;
    set_sample_environment();
    const auto tokens_file = dir.file("tokens.json", R"([{"token": "t-aaaaaaaa", "tenant": "a"}])").string();
    std::size_t tried = 0;
    for (const auto& o : config::options()) {
        if (o.kind != config::option_kind::value) continue;
        ASSERT_TRUE(o.set) << o.name << " is a value option without a setter";
        // --tokens-file reads its file at once: the sample names one this test writes.
        const std::string sample = o.name == "tokens_file" ? tokens_file : std::string(o.sample);
        std::vector<std::string> args;
        nlohmann::json file = nlohmann::json::object();
        for (const auto& [name, value] : partners) {
            if (name == o.name) continue;
            args.insert(args.end(), {config::command_line_name(name), value});
            file[name] = value;
        }
        const auto cli = config::command_line_name(o.name);
        EXPECT_NO_THROW(parse([&] { auto a = args; a.insert(a.end(), {cli, sample}); return a; }()))
            << cli << " " << sample;
        EXPECT_NO_THROW(parse([&] { auto a = args; a.push_back(cli + "=" + sample); return a; }()))
            << cli << "=" << sample;
        // In the file as JSON has it: a number or a boolean where the sample is one, else a string.
        const auto typed = nlohmann::json::parse(sample, nullptr, false);
        file[std::string(o.name)] = !typed.is_discarded() && (typed.is_number() || typed.is_boolean()) ? typed
                                                                                                    : nlohmann::json(sample);
        const auto path = dir.file("config.json", file.dump());
        EXPECT_NO_THROW(parse({"--config", path.string()})) << file.dump();
        ++tried;
    }
    EXPECT_GE(tried, 78u);  // the value options when this test was written; the loop skips none
}

TEST(configuration_reference, every_config_file_example_parses) {
    const temp_dir dir;
    set_sample_environment();
    for (const auto& o : config::options()) {
        if (o.kind != config::option_kind::file_only) continue;
        const auto example = nlohmann::json::parse(o.sample, nullptr, false);
        ASSERT_TRUE(example.is_object()) << o.name << "'s example is not a JSON object";
        EXPECT_TRUE(example.contains(std::string(o.name))) << o.name << "'s example does not show it";
        const auto path = dir.file(std::string(o.name) + ".json", std::string(o.sample));
        EXPECT_NO_THROW(parse({"--config", path.string()})) << o.sample;
    }
    const auto tokens = parse({"--config", dir.file("t.json", std::string(config::find_option("tokens")->sample)).string()});
    ASSERT_EQ(tokens.tokens.size(), 3u);
    EXPECT_TRUE(tokens.tokens[0].is_operator);
    EXPECT_EQ(tokens.tokens[1].max_sessions, 8u);
}

TEST(configuration_reference, an_unknown_option_is_named_in_its_error) {
    EXPECT_NE(message_of({"--no-such-option", "1"}).find("unknown option --no-such-option"), std::string::npos);
    EXPECT_NE(message_of({"--check-config=1"}).find("unknown option --check-config"), std::string::npos);
    const temp_dir dir;
    const auto path = dir.file("bad.json", R"({"no_such_option": 1})");
    EXPECT_NE(message_of({"--config", path.string()}).find("unknown key 'no_such_option'"), std::string::npos);
    // Entries parse_config handles itself are no config file keys.
    const auto help = dir.file("help.json", R"({"help": true})");
    EXPECT_NE(message_of({"--config", help.string()}).find("unknown key 'help'"), std::string::npos);
    EXPECT_TRUE(parse({"--config-reference", "--no-such-option"}).reference_only);
}

TEST(configuration_reference, every_option_has_a_section_a_default_and_help) {
    std::set<std::string_view> sections, names;
    for (const auto& s : config::sections()) sections.insert(s.name);
    for (const auto& o : config::options()) {
        EXPECT_TRUE(names.insert(o.name).second) << o.name << " is in the table twice";
        EXPECT_EQ(sections.count(o.section), 1u) << o.name << ": no section '" << o.section << "'";
        EXPECT_FALSE(o.help.empty()) << o.name << " has no help";
        EXPECT_FALSE(o.fallback.empty()) << o.name << " has no default";
        EXPECT_EQ(o.kind == config::option_kind::value, static_cast<bool>(o.set)) << o.name;
        if (o.kind != config::option_kind::command_line) EXPECT_FALSE(o.sample.empty()) << o.name << " has no sample";
        if (o.kind == config::option_kind::value) EXPECT_FALSE(o.value.empty()) << o.name << " says not what it takes";
        EXPECT_TRUE(o.help.ends_with('.')) << o.name << "'s help is not a sentence";
    }
}
