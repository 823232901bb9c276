#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/node_settings.hpp"
#include "cellgate/launcher/oci_runtime.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

using namespace cellgate::launcher;

namespace {

launcher_config no_subid_files() {
    launcher_config c;
    c.subid_files.clear();
    return c;
}

}  // namespace

TEST(node_settings, options_set_the_parent_and_the_range) {
    auto c = no_subid_files();
    EXPECT_TRUE(apply_node_option(c, "--cgroup-parent", "cellgate-b/nodes"));
    EXPECT_TRUE(apply_node_option(c, "--uid-range-start", "300000000"));
    EXPECT_TRUE(apply_node_option(c, "--uid-range-slots", "16"));
    EXPECT_FALSE(apply_node_option(c, "--state-dir", "/x"));
    EXPECT_EQ(c.cgroup_parent, "cellgate-b/nodes");
    EXPECT_EQ(host_id_range(c).first, 300000000u);
    EXPECT_EQ(host_id_range(c).count, 16u * 65536u);
    EXPECT_NO_THROW(check_node_settings(c));
    for (const char* bad : {"", "-1", "12x", "99999999999"})
        EXPECT_THROW(apply_node_option(c, "--uid-range-start", bad), spec_error) << bad;
    for (const char* bad : {"0", "65537"}) EXPECT_THROW(apply_node_option(c, "--uid-range-slots", bad), spec_error);
}

TEST(node_settings, cgroup_parent_must_be_plain_relative_names) {
    auto c = no_subid_files();
    for (const char* bad : {"", "/cellgate", "..", "a/../b", "a//b", "a/", "a b", "a/b/c/d/e", "x\n"}) {
        c.cgroup_parent = bad;
        EXPECT_THROW(check_node_settings(c), spec_error) << bad;
    }
    c.cgroup_parent = "cellgate.node-2_a";
    EXPECT_NO_THROW(check_node_settings(c));
}

TEST(node_settings, id_range_must_fit_above_the_host_users_and_below_2_32) {
    auto c = no_subid_files();
    c.host_id_base = 1000;
    EXPECT_THROW(check_node_settings(c), spec_error);
    c.host_id_base = 4294967295u - 65536u;  // one slot would end past 2^32-1
    c.max_slots = 2;
    EXPECT_THROW(check_node_settings(c), spec_error);
    c.max_slots = 1;  // last id 2^32-2: (uid_t)-1 itself is never handed out
    EXPECT_NO_THROW(check_node_settings(c));
}

TEST(node_settings, subid_entries_that_overlap_are_found) {
    const id_range ours{1000000, 4096ull * 65536};
    const auto found = subid_overlaps("# comment\nalice:100000:65536\nbob:999999:2\nbad line\ncarol:x:1\n"
                                      "dave:269435455:10\nerin:269435456:65536\n",
                                      "/etc/subuid", ours);
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].owner, "bob");  // its last id is our first
    EXPECT_EQ(found[1].owner, "dave");  // its first id is our last
    EXPECT_TRUE(subid_overlaps("", "f", ours).empty());
}

TEST(node_settings, start_up_check_refuses_a_range_listed_in_a_subid_file) {
    const auto dir = std::filesystem::temp_directory_path() / ("cg-subid-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "subuid") << "podman:1065536:65536\n";
    auto c = no_subid_files();
    c.subid_files = {dir / "missing", dir / "subuid"};
    try {
        check_node_settings(c);
        ADD_FAILURE() << "an overlap with a subuid entry must refuse the start";
    } catch (const spec_error& e) {
        EXPECT_NE(std::string(e.what()).find("podman"), std::string::npos) << e.what();
    }
    c.host_id_base = 2000000;  // starts past podman's range
    EXPECT_NO_THROW(check_node_settings(c));
    std::filesystem::remove_all(dir);
}

TEST(node_settings, the_on_off_switches) {
    const std::pair<const char*, bool launcher_config::*> switches[] = {{"--memory-merge", &launcher_config::memory_merge},
                                                                        {"--zygote", &launcher_config::zygote}};
    for (const auto& [name, member] : switches) {
        auto c = no_subid_files();
        EXPECT_FALSE(c.*member) << name;
        EXPECT_TRUE(is_node_option(name));
        EXPECT_TRUE(apply_node_option(c, name, "on"));
        EXPECT_TRUE(c.*member) << name;
        EXPECT_TRUE(apply_node_option(c, name, "off"));
        EXPECT_FALSE(c.*member) << name;
        for (const char* bad : {"", "yes", "1", "ON"}) EXPECT_THROW(apply_node_option(c, name, bad), spec_error) << bad;
    }
    for (const char* name : {"--cgroup-parent", "--uid-range-start", "--uid-range-slots", "--runsc-platform"})
        EXPECT_TRUE(is_node_option(name)) << name;
    EXPECT_FALSE(is_node_option("--state-dir"));
}

TEST(node_settings, the_runsc_platform_option_and_its_auto_probe) {
    auto c = no_subid_files();
    EXPECT_EQ(c.runsc_platform, "auto");
    for (const char* ok : {"kvm", "ptrace", "auto"}) {
        EXPECT_TRUE(apply_node_option(c, "--runsc-platform", ok));
        EXPECT_EQ(c.runsc_platform, ok);
    }
    for (const char* bad : {"", "KVM", "qemu", "kvm "}) EXPECT_THROW(apply_node_option(c, "--runsc-platform", bad), spec_error) << bad;

    std::string why;
    EXPECT_EQ(resolve_runsc_platform("ptrace", &why), "ptrace");
    EXPECT_EQ(why, "as configured");
    EXPECT_EQ(resolve_runsc_platform("kvm", &why), "kvm");  // an explicit kvm is kept (the runtime then says if it cannot)
    // No device: ptrace, and why.
    EXPECT_EQ(resolve_runsc_platform("auto", &why, "/nonexistent/kvm"), "ptrace");
    EXPECT_NE(why.find("/nonexistent/kvm cannot be opened"), std::string::npos) << why;
    // A device that is not KVM's: it opens, but the ioctl fails.
    EXPECT_EQ(resolve_runsc_platform("auto", &why, "/dev/null"), "ptrace");
    EXPECT_NE(why.find("KVM_GET_API_VERSION"), std::string::npos) << why;
    // This machine: kvm exactly when /dev/kvm makes virtual machines.
    const auto here = resolve_runsc_platform("auto", &why);
    if (::access("/dev/kvm", R_OK | W_OK) != 0) EXPECT_EQ(here, "ptrace") << why;
    EXPECT_TRUE(here == "kvm" || here == "ptrace") << here;
    EXPECT_EQ(here == "kvm", why == "/dev/kvm makes virtual machines") << why;
}
