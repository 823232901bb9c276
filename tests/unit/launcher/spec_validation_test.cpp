#include "cellgate/launcher/launcher.hpp"
#include "spec_validation.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using namespace cellgate::launcher;
namespace fs = std::filesystem;

namespace {

// A fake image store with one image ("python") and separate state dirs, so
// validation can run without root and a failed launch can be seen to start nothing.
class spec_validation : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("cellgate-unit-" + std::to_string(::getpid()) + "-" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(root_ / "images/python/abc/rootfs/usr");
        fs::create_directory_symlink("abc", root_ / "images/python/current");
        cfg_.image_store = root_ / "images";
        cfg_.state_dir = root_ / "state";
        cfg_.workspace_root = root_ / "workspaces";
    }
    void TearDown() override { fs::remove_all(root_); }

    void expect_refused(const sandbox_spec& spec, const std::string& fragment) {
        try {
            validate_spec(spec, cfg_);
            ADD_FAILURE() << "accepted a spec that should be refused (" << fragment << ")";
        } catch (const spec_error& e) {
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
                << "message '" << e.what() << "' does not mention '" << fragment << "'";
            EXPECT_EQ(e.step(), "validate");
        }
    }

    fs::path root_;
    launcher_config cfg_;
};

}  // namespace

TEST_F(spec_validation, the_default_spec_is_valid) { EXPECT_NO_THROW(validate_spec(sandbox_spec{}, cfg_)); }

TEST_F(spec_validation, an_unknown_image_is_refused_by_name) {
    sandbox_spec s;
    s.image = "ruby";
    expect_refused(s, "unknown image 'ruby'");
    s.image = "../python";
    expect_refused(s, "not valid");
    s.image = "/var/cache/cellgate/images/python/current/rootfs";
    expect_refused(s, "not valid");
}

TEST_F(spec_validation, absurd_limits_are_refused) {
    sandbox_spec s;
    s.limits.memory_bytes = 1 << 20;
    expect_refused(s, "memory limit");
    s = {};
    s.limits.memory_bytes = 1ull << 50;
    expect_refused(s, "memory limit");
    s = {};
    s.limits.pids = 0;
    expect_refused(s, "pids limit");
    s = {};
    s.limits.cpu_millis = 1000000;
    expect_refused(s, "cpu_millis");
    s = {};
    s.limits.workspace_bytes = 4096;
    expect_refused(s, "workspace size");
    s = {};
    s.limits.nofile = 3;
    expect_refused(s, "nofile");
}

TEST_F(spec_validation, negative_numbers_in_a_json_request_are_refused) {
    const auto parse = [](const char* text) { return nlohmann::json::parse(text).get<sandbox_spec>(); };
    EXPECT_THROW(parse(R"({"limits":{"memory_bytes":-1}})"), spec_error);
    EXPECT_THROW(parse(R"({"limits":{"pids":-5}})"), spec_error);
    EXPECT_THROW(parse(R"({"uid":-1})"), spec_error);
    EXPECT_THROW(parse(R"({"limits":{"pids":1.5}})"), spec_error);
    EXPECT_THROW(parse(R"({"limits":{"pids":99999999999}})"), spec_error);
    EXPECT_THROW(parse(R"({"imagee":"python"})"), spec_error) << "unknown fields are refused";
    EXPECT_THROW(parse(R"({"env":{"KERNEL_X":1}})"), spec_error);
    EXPECT_THROW(parse(R"([1,2])"), spec_error);
    EXPECT_NO_THROW(parse(R"({"image":"python","limits":{"memory_bytes":1073741824},"env":{"KERNEL_A":"b"}})"));
}

TEST_F(spec_validation, workspace_paths_must_be_absolute_normal_and_under_the_root) {
    sandbox_spec s;
    s.workspace_dir = "relative/ws";
    expect_refused(s, "absolute");
    s.workspace_dir = (cfg_.workspace_root / ".." / "escape").string();
    expect_refused(s, "normalised");
    s.workspace_dir = (cfg_.workspace_root / "a" / ".." / ".." / "etc").string();
    expect_refused(s, "normalised");
    s.workspace_dir = "/etc";
    expect_refused(s, "directly under");
    s.workspace_dir = (cfg_.workspace_root / "a" / "b").string();
    expect_refused(s, "directly under");
    s.workspace_dir = (cfg_.workspace_root / ".hidden").string();
    expect_refused(s, "");
    s.workspace_dir = (cfg_.workspace_root / "session-1").string();
    EXPECT_NO_THROW(validate_spec(s, cfg_));
}

TEST_F(spec_validation, uid_or_gid_zero_is_refused) {
    sandbox_spec s;
    s.uid = 0;
    expect_refused(s, "uid or gid 0");
    s = {};
    s.gid = 0;
    expect_refused(s, "uid or gid 0");
    s = {};
    s.uid = 70000;
    expect_refused(s, "below 65534");
}

TEST_F(spec_validation, only_allow_listed_environment_names_pass) {
    sandbox_spec s;
    s.env["AWS_SECRET_ACCESS_KEY"] = "x";
    expect_refused(s, "not on the allow-list");
    s.env = {{"PATH", "/evil"}};
    expect_refused(s, "not on the allow-list");
    s.env = {{"LD_PRELOAD", "/tmp/x.so"}};
    expect_refused(s, "not on the allow-list");
    s.env = {{"KERNEL_", "x"}};
    expect_refused(s, "not on the allow-list");
    s.env = {{"KERNEL_A", std::string("a\0b", 3)}};
    expect_refused(s, "NUL");
    s.env = {{"KERNEL_USERNAME", "alice"}, {"LANG", "de_DE.UTF-8"}, {"TZ", "Europe/Berlin"}};
    EXPECT_NO_THROW(validate_spec(s, cfg_));
    EXPECT_TRUE(env_name_allowed("LC_ALL", cfg_));
    EXPECT_FALSE(env_name_allowed("KERNEL-X", cfg_));
}

TEST_F(spec_validation, ids_and_preload_names_are_checked) {
    sandbox_spec s;
    s.id = "../../etc";
    expect_refused(s, "sandbox id");
    s.id = std::string(65, 'a');
    expect_refused(s, "sandbox id");
    s = {};
    s.preload = {"numpy; import os"};
    expect_refused(s, "not a module name");
    s.preload = {"numpy", "matplotlib.pyplot"};
    EXPECT_NO_THROW(validate_spec(s, cfg_));
}

TEST_F(spec_validation, a_refused_spec_starts_nothing) {
    launcher l(cfg_);
    sandbox_spec s;
    s.limits.memory_bytes = 1;
    EXPECT_THROW(l.launch(s), spec_error);
    s = {};
    s.image = "nope";
    EXPECT_THROW(l.launch(s), spec_error);
    s = {};
    s.runtime = "kata";
    EXPECT_THROW(l.launch(s), spec_error);
    EXPECT_FALSE(fs::exists(cfg_.state_dir)) << "a run dir was made for a refused spec";
    EXPECT_FALSE(fs::exists(cfg_.workspace_root)) << "a workspace was made for a refused spec";
}

TEST_F(spec_validation, json_round_trip_keeps_every_field) {
    sandbox_spec s;
    s.id = "abc";
    s.limits.pids = 99;
    s.env = {{"KERNEL_X", "y"}};
    s.preload = {"numpy"};
    s.start_timeout = std::chrono::milliseconds(1234);
    const auto back = nlohmann::json(s).get<sandbox_spec>();
    EXPECT_EQ(nlohmann::json(back), nlohmann::json(s));
}

TEST_F(spec_validation, volumes_are_ids_mounted_at_volumes_slash_a_name_once_each) {
    sandbox_spec s;
    s.volumes = {{"vol-1", "/volumes/data", false}, {"vol-2", "/volumes/ref", true}};
    EXPECT_NO_THROW(validate_spec(s, cfg_));
    s.volumes = {{"vol-1", "/etc", false}};
    expect_refused(s, "/volumes/<name>");
    s.volumes = {{"vol-1", "/volumes/../etc", false}};
    expect_refused(s, "/volumes/<name>");
    s.volumes = {{"vol-1", "/volumes/a/b", false}};
    expect_refused(s, "/volumes/<name>");
    s.volumes = {{"../vol", "/volumes/a", false}};
    expect_refused(s, "volume id");
    s.volumes = {{"vol-1", "/volumes/a", false}, {"vol-1", "/volumes/b", true}};
    expect_refused(s, "once");
    s.volumes = {{"vol-1", "/volumes/a", false}, {"vol-2", "/volumes/a", true}};
    expect_refused(s, "once");
    s.volumes.clear();
    for (int i = 0; i < 9; ++i) s.volumes.push_back({"v" + std::to_string(i), "/volumes/v" + std::to_string(i), true});
    expect_refused(s, "at most 8");
    s.volumes.clear();
    s.from_snapshot = "../../etc";
    expect_refused(s, "from_snapshot");
}
