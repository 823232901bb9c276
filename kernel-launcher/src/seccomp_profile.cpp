#include "seccomp_profile.hpp"

#include <cstdint>

namespace cellgate::launcher {

nlohmann::json default_seccomp_profile() {
    using nlohmann::json;
    constexpr int eperm = 1;
    constexpr int enosys = 38;

    // Grouped by why a kernel must not have them.
    const json denied = {
        // filesystem and mount namespace manipulation
        "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
        "fsconfig", "fsmount", "fspick", "mount_setattr", "open_by_handle_at",
        "name_to_handle_at", "quotactl", "quotactl_fd",
        // namespaces
        "unshare", "setns",
        // looking into or controlling other processes
        "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
        "process_madvise",
        // kernel and module loading, machine state
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "create_module", "get_kernel_syms", "query_module", "reboot", "swapon", "swapoff",
        "acct", "settimeofday", "clock_settime", "clock_settime64", "clock_adjtime",
        "clock_adjtime64", "adjtimex", "sethostname", "setdomainname", "syslog", "vhangup",
        "iopl", "ioperm", "uselib", "nfsservctl", "lookup_dcookie", "_sysctl",
        // large kernel attack surface with no use in a notebook
        "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "io_uring_setup",
        "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
        "personality", "landlock_create_ruleset", "landlock_add_rule",
        "landlock_restrict_self"};

    json syscalls = json::array();
    syscalls.push_back({{"names", denied}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", eperm}});
    // clone3 passes its flags in memory, where seccomp cannot look; ENOSYS makes
    // libc fall back to clone, whose flags are checked below.
    syscalls.push_back(
        {{"names", json::array({"clone3"})}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", enosys}});
    constexpr std::uint64_t namespace_flags[] = {
        0x00020000,   // CLONE_NEWNS
        0x02000000,   // CLONE_NEWCGROUP
        0x04000000,   // CLONE_NEWUTS
        0x08000000,   // CLONE_NEWIPC
        0x10000000,   // CLONE_NEWUSER
        0x20000000,   // CLONE_NEWPID
        0x40000000};  // CLONE_NEWNET
    for (const auto flag : namespace_flags)
        syscalls.push_back({{"names", json::array({"clone"})},
                            {"action", "SCMP_ACT_ERRNO"},
                            {"errnoRet", eperm},
                            {"args", json::array({{{"index", 0},
                                                   {"value", flag},
                                                   {"valueTwo", flag},
                                                   {"op", "SCMP_CMP_MASKED_EQ"}}})}});

    // Socket address families: AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK only.
    // The network namespace confines the IP families; others (AF_VSOCK reaches
    // the hypervisor from a VM guest, AF_ALG is kernel crypto attack surface)
    // are not confined by it. A rule per refused value or range, one condition
    // each: everything below 17 but 1, 2, 10 and 16, and everything from 17 up
    // (AF_PACKET is 17; the comparison is on all 64 bits, so a value with high
    // bits set is refused too). socketcall, the x86 multiplexer, would hide the
    // family from seccomp: it is refused outright.
    constexpr int eafnosupport = 97;
    auto refuse_family = [&](const char* op, std::uint64_t value) {
        syscalls.push_back({{"names", json::array({"socket", "socketpair"})},
                            {"action", "SCMP_ACT_ERRNO"},
                            {"errnoRet", eafnosupport},
                            {"args", json::array({{{"index", 0}, {"value", value}, {"op", op}}})}});
    };
    for (const std::uint64_t family : {0U, 3U, 4U, 5U, 6U, 7U, 8U, 9U, 11U, 12U, 13U, 14U, 15U})
        refuse_family("SCMP_CMP_EQ", family);
    refuse_family("SCMP_CMP_GE", 17);
    syscalls.push_back(
        {{"names", json::array({"socketcall"})}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", enosys}});

    return {{"defaultAction", "SCMP_ACT_ALLOW"},
            {"architectures", json::array({"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"})},
            {"syscalls", syscalls}};
}

nlohmann::json gvisor_seccomp_profile() {
    auto p = default_seccomp_profile();
    auto& rules = p.at("syscalls");
    for (auto it = rules.begin(); it != rules.end();) {
        if (it->at("names") == nlohmann::json::array({"clone3"}))
            it = rules.erase(it);
        else
            ++it;
    }
    return p;
}

}  // namespace cellgate::launcher
