#include "oci_config.hpp"
#include "../test_paths.hpp"
#include "seccomp_profile.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <set>
#include <string>

using namespace cellgate::launcher;
using nlohmann::json;

namespace {

oci_inputs fixed_inputs() {
    oci_inputs in;
    in.id = "0f1e2d3c-golden";
    in.rootfs = "/var/cache/cellgate/images/python/0123456789abcdef/rootfs";
    in.workspace_dir = "/var/lib/cellgate/workspaces/0f1e2d3c-golden";
    in.kernel_dir = "/run/cellgate/sandboxes/0f1e2d3c-golden/kernel";
    in.host_id_base = 1065536;
    in.uid = 1000;
    in.gid = 1000;
    in.limits = sandbox_limits{};
    in.args = kernel_args();
    in.env = base_environment(in.limits);
    in.env.push_back("KERNEL_USERNAME=alice");
    in.cgroups_path = "/cellgate/0f1e2d3c-golden";
    return in;
}

// Compares with the committed golden file; CELLGATE_UPDATE_GOLDEN=1 rewrites it.
void expect_golden(const json& actual, const std::string& name) {
    const std::string path = std::string(cellgate::fixtures::golden_dir) + "/" + name;
    if (std::getenv("CELLGATE_UPDATE_GOLDEN") != nullptr) {
        std::ofstream(path) << actual.dump(2) << "\n";
        GTEST_SKIP() << "golden file rewritten: " << path;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in) << "missing golden file " << path;
    const json expected = json::parse(in);
    EXPECT_EQ(actual, expected) << "diff against " << path << ":\n" << json::diff(expected, actual).dump(2);
}

const json* find_mount(const json& config, const std::string& destination) {
    for (const auto& m : config.at("mounts"))
        if (m.at("destination") == destination) return &m;
    return nullptr;
}

bool has_option(const json& mount, const std::string& option) {
    for (const auto& o : mount.at("options"))
        if (o == option) return true;
    return false;
}

}  // namespace

TEST(oci_config, matches_the_golden_file) { expect_golden(build_oci_config(fixed_inputs()), "oci_config.json"); }

TEST(oci_config, the_rootfs_is_read_only_and_the_process_unprivileged) {
    const auto c = build_oci_config(fixed_inputs());
    EXPECT_EQ(c.at("root").at("readonly"), true);
    EXPECT_EQ(c.at("process").at("user").at("uid"), 1000);
    EXPECT_EQ(c.at("process").at("noNewPrivileges"), true);
    for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"})
        EXPECT_TRUE(c.at("process").at("capabilities").at(set).empty()) << set;
}

TEST(oci_config, every_namespace_is_new_including_user_and_network) {
    const auto c = build_oci_config(fixed_inputs());
    std::set<std::string> types;
    for (const auto& ns : c.at("linux").at("namespaces")) {
        EXPECT_FALSE(ns.contains("path")) << "a namespace joined instead of created";
        types.insert(ns.at("type").get<std::string>());
    }
    for (const char* t : {"pid", "network", "ipc", "uts", "mount", "user"}) EXPECT_TRUE(types.count(t)) << t;
    const auto& uid_map = c.at("linux").at("uidMappings").at(0);
    EXPECT_EQ(uid_map.at("containerID"), 0);
    EXPECT_EQ(uid_map.at("hostID"), 1065536);
    EXPECT_EQ(uid_map.at("size"), 65536);
}

TEST(oci_config, limits_reach_cgroups_and_rlimits) {
    auto in = fixed_inputs();
    in.limits.memory_bytes = 512ull << 20;
    in.limits.pids = 64;
    in.limits.cpu_millis = 1500;
    in.limits.nofile = 1024;
    in.limits.workspace_bytes = 100ull << 20;
    in.limits.tmp_bytes = 50ull << 20;
    const auto c = build_oci_config(in);
    const auto& r = c.at("linux").at("resources");
    EXPECT_EQ(r.at("memory").at("limit"), 512ull << 20);
    EXPECT_EQ(r.at("memory").at("swap"), 512ull << 20) << "swap equal to the limit means no swap";
    EXPECT_EQ(r.at("pids").at("limit"), 64);
    EXPECT_EQ(r.at("cpu").at("quota"), 150000);
    EXPECT_EQ(r.at("cpu").at("period"), 100000);
    std::map<std::string, std::uint64_t> rl;
    for (const auto& l : c.at("process").at("rlimits")) rl[l.at("type")] = l.at("hard").get<std::uint64_t>();
    EXPECT_EQ(rl.at("RLIMIT_NOFILE"), 1024u);
    EXPECT_EQ(rl.at("RLIMIT_FSIZE"), 100ull << 20);
    EXPECT_EQ(rl.at("RLIMIT_CORE"), 0u);
    EXPECT_TRUE(has_option(*find_mount(c, "/tmp"), "size=" + std::to_string(50ull << 20)));
}

TEST(oci_config, workspace_and_kernel_dir_are_bound_without_suid_or_devices_and_only_the_workspace_executes) {
    const auto c = build_oci_config(fixed_inputs());
    for (const char* dest : {"/workspace", "/run/kernel", "/tmp"}) {
        const auto* m = find_mount(c, dest);
        ASSERT_NE(m, nullptr) << dest;
        for (const char* o : {"nosuid", "nodev"}) EXPECT_TRUE(has_option(*m, o)) << dest << " " << o;
        // A compiled program runs from the workspace; nothing runs from /tmp or the run dir.
        EXPECT_EQ(has_option(*m, "noexec"), std::string(dest) != "/workspace") << dest;
    }
    EXPECT_EQ(find_mount(c, "/workspace")->at("source"), "/var/lib/cellgate/workspaces/0f1e2d3c-golden");
    EXPECT_TRUE(has_option(*find_mount(c, "/sys"), "ro"));
}

TEST(oci_config, the_environment_is_only_what_the_launcher_built) {
    const auto c = build_oci_config(fixed_inputs());
    const auto env = c.at("process").at("env");
    for (const auto& e : env) {
        const auto s = e.get<std::string>();
        EXPECT_EQ(s.find("SECRET"), std::string::npos);
    }
    EXPECT_EQ(env.size(), base_environment(sandbox_limits{}).size() + 1);
}

namespace {

oci_inputs gvisor_inputs() {
    auto in = fixed_inputs();
    in.args = relayed_kernel_args();
    in.gvisor = oci_inputs::gvisor_inputs{"/run/cellgate/sandboxes/0f1e2d3c-golden/relay-script"};
    return in;
}

std::map<std::string, std::uint64_t> rlimits_of(const json& c) {
    std::map<std::string, std::uint64_t> rl;
    for (const auto& l : c.at("process").at("rlimits")) rl[l.at("type")] = l.at("hard").get<std::uint64_t>();
    return rl;
}

}  // namespace

TEST(oci_config, the_gvisor_config_matches_its_golden_file) {
    expect_golden(build_oci_config(gvisor_inputs()), "oci_config_runsc.json");
}

TEST(oci_config, under_gvisor_the_pids_limit_moves_inside_the_sandbox) {
    auto in = gvisor_inputs();
    in.limits.pids = 48;
    const auto c = build_oci_config(in);
    EXPECT_EQ(rlimits_of(c).at("RLIMIT_NPROC"), 48u) << "the sentry enforces it on fork";
    const auto host = c.at("linux").at("resources").at("pids").at("limit").get<std::uint32_t>();
    EXPECT_EQ(host, gvisor_host_pids(48));
    EXPECT_GT(host, 48u * 9) << "room for the sentry's threads and a ptrace stub per guest process";
    EXPECT_EQ(gvisor_host_pids(1u << 31), 4u << 20) << "capped at the kernel's pid maximum";
    const auto runc = build_oci_config(fixed_inputs());
    EXPECT_EQ(rlimits_of(runc).count("RLIMIT_NPROC"), 0u) << "under runc the pids cgroup does it";
}

TEST(oci_config, under_gvisor_the_relay_is_mounted_read_only_and_runs_the_kernel) {
    const auto c = build_oci_config(gvisor_inputs());
    const auto* m = find_mount(c, "/mnt");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->at("source"), "/run/cellgate/sandboxes/0f1e2d3c-golden/relay-script");
    for (const char* o : {"ro", "nosuid", "nodev", "noexec"}) EXPECT_TRUE(has_option(*m, o)) << o;
    const auto args = c.at("process").at("args");
    EXPECT_EQ(args.at(0), "/usr/bin/tini");
    EXPECT_EQ(args.at(6), "/mnt/cellgate-relay.py");
    EXPECT_EQ(args.back(), "/run/kernel/connection.json");
    EXPECT_EQ(find_mount(build_oci_config(fixed_inputs()), "/mnt"), nullptr);
}

TEST(seccomp_profile, gvisor_gets_the_same_rules_but_clone3) {
    auto plain = default_seccomp_profile();
    const auto gvisor = gvisor_seccomp_profile();
    auto& rules = plain.at("syscalls");
    ASSERT_EQ(rules.size(), gvisor.at("syscalls").size() + 1);
    for (auto it = rules.begin(); it != rules.end(); ++it)
        if (it->at("names") == json::array({"clone3"})) {
            rules.erase(it);
            break;
        }
    EXPECT_EQ(plain, gvisor);
}

TEST(seccomp_profile, denies_what_kernels_never_need) {
    const auto p = default_seccomp_profile();
    std::set<std::string> denied;
    for (const auto& rule : p.at("syscalls"))
        if (rule.at("action") == "SCMP_ACT_ERRNO" && !rule.contains("args"))
            for (const auto& n : rule.at("names")) denied.insert(n.get<std::string>());
    for (const char* s : {"mount", "ptrace", "kexec_load", "bpf", "keyctl", "add_key", "unshare", "setns",
                          "perf_event_open", "open_by_handle_at", "init_module", "userfaultfd", "clone3"})
        EXPECT_TRUE(denied.count(s)) << s;
    int clone_rules = 0;
    for (const auto& rule : p.at("syscalls"))
        if (rule.contains("args") && rule.at("names").at(0) == "clone") ++clone_rules;
    EXPECT_EQ(clone_rules, 7) << "one rule per namespace flag";
}

// Evaluates the profile's conditional rules for socket(2) the way seccomp
// would: a family is refused when any rule's single condition matches it.
TEST(seccomp_profile, socket_allows_only_unix_inet_inet6_and_netlink) {
    const auto p = default_seccomp_profile();
    auto refused = [&](std::uint64_t family, const std::string& call) {
        for (const auto& rule : p.at("syscalls")) {
            if (!rule.contains("args")) continue;
            bool names_call = false;
            for (const auto& n : rule.at("names")) names_call = names_call || n == call;
            if (!names_call) continue;
            const auto& a = rule.at("args").at(0);
            EXPECT_EQ(rule.at("args").size(), 1u);
            EXPECT_EQ(a.at("index"), 0);
            const auto v = a.at("value").get<std::uint64_t>();
            if ((a.at("op") == "SCMP_CMP_EQ" && family == v) || (a.at("op") == "SCMP_CMP_GE" && family >= v))
                return true;
        }
        return false;
    };
    for (const std::string call : {"socket", "socketpair"}) {
        std::set<std::uint64_t> allowed;
        for (std::uint64_t f = 0; f < 256; ++f)
            if (!refused(f, call)) allowed.insert(f);
        EXPECT_EQ(allowed, (std::set<std::uint64_t>{1, 2, 10, 16})) << call;
        EXPECT_TRUE(refused(40, call)) << "AF_VSOCK";
        EXPECT_TRUE(refused(38, call)) << "AF_ALG";
        EXPECT_TRUE(refused((std::uint64_t{1} << 32) | 40, call)) << "high bits set";
    }
    bool socketcall_refused = false;
    for (const auto& rule : p.at("syscalls"))
        if (rule.at("names") == json::array({"socketcall"}) && !rule.contains("args")) socketcall_refused = true;
    EXPECT_TRUE(socketcall_refused);
}
TEST(oci_config, an_exec_process_keeps_the_sandboxs_confinement_and_takes_the_execs_command) {
    const json sandbox = {{"terminal", false},
                          {"user", {{"uid", 1000}, {"gid", 1000}, {"additionalGids", json::array()}, {"umask", 18}}},
                          {"args", {"/usr/bin/tini", "-g", "--", "kernel"}},
                          {"env", {"PATH=/usr/bin", "KERNEL_SECRETISH=1"}},
                          {"cwd", "/workspace"},
                          {"capabilities", {{"bounding", json::array()}, {"effective", json::array()}}},
                          {"rlimits", {{{"type", "RLIMIT_NOFILE"}, {"hard", 64}, {"soft", 64}}}},
                          {"noNewPrivileges", true},
                          {"oomScoreAdj", 800}};
    exec_spec s;
    s.argv = {"sh", "-c", "echo $HOME"};
    s.cwd = "/tmp";
    s.env = {{"HOME", "/workspace"}, {"EXTRA", "x=y"}};
    const auto p = build_exec_process(sandbox, s, {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"});
    EXPECT_EQ(p["args"], json(s.argv));
    EXPECT_EQ(p["cwd"], "/tmp");
    EXPECT_EQ(p["terminal"], false);
    EXPECT_FALSE(p.contains("consoleSize"));
    // The kernel's own env (KERNEL_*, preloads) is not the exec's: base env, then the exec's names.
    EXPECT_EQ(p["env"], json({"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8", "EXTRA=x=y"}));
    for (const char* kept : {"user", "capabilities", "rlimits", "noNewPrivileges", "oomScoreAdj"})
        EXPECT_EQ(p[kept], sandbox[kept]) << kept;

    s.tty = true;
    s.rows = 33;
    s.cols = 111;
    const auto t = build_exec_process(sandbox, s, {"PATH=/bin"});
    EXPECT_EQ(t["terminal"], true);
    EXPECT_EQ(t["consoleSize"], json({{"height", 33}, {"width", 111}}));
    EXPECT_EQ(t["env"], json({"PATH=/bin", "TERM=xterm-256color", "EXTRA=x=y", "HOME=/workspace"}));
    s.env["TERM"] = "vt100";
    EXPECT_EQ(build_exec_process(sandbox, s, {})["env"], json({"EXTRA=x=y", "HOME=/workspace", "TERM=vt100"}));
}

