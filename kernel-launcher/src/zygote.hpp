#pragma once

// The kernel zygote (launcher_config::zygote): one pre-imported Python per
// image that forks kernels into runc sandboxes made for them, so a start
// skips the imports. The Python side is the image's
// /opt/cellgate/cellgate-zygote, which says how the forked kernel is
// confined; this side starts it without any capability, in a read-only view
// of the image, and hands it each sandbox's namespaces.

#include "cellgate/launcher/sandbox_spec.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cellgate::launcher {

// One seccomp filter of a process, as the kernel reports it
// (PTRACE_SECCOMP_GET_FILTER and _GET_METADATA): the BPF and its flags.
struct seccomp_filter {
    std::string bpf;  // struct sock_filter[], raw
    std::uint64_t flags = 0;
};

// All of `pid`'s filters, newest first. Read through ptrace by a forked child
// of this process (the caller needs CAP_SYS_ADMIN and may ptrace `pid`).
std::vector<seccomp_filter> read_seccomp_filters(std::int64_t pid);

// What the forked kernel is given, besides the sandbox's namespaces.
struct zygote_fork {
    std::int64_t init_pid = 0;        // the sandbox's init (its namespaces, and ended with the kernel)
    std::string cgroups_path;         // "/cellgate/<id>": the kernel's cgroups
    int log_fd = -1;                  // the sandbox's kernel.log, its stdout and stderr
    std::uint32_t uid = 1000, gid = 1000;  // inside the sandbox
    std::uint64_t nofile = 0, fsize = 0;
    int oom_score_adj = 800;
    std::vector<seccomp_filter> seccomp;  // newest first; never empty
};

class zygotes {
public:
    // `log_dir`: where each zygote's own output goes (zygote-<hash>.log).
    explicit zygotes(std::filesystem::path log_dir);
    ~zygotes();
    zygotes(const zygotes&) = delete;
    zygotes& operator=(const zygotes&) = delete;

    // Whether the image at `rootfs` has a zygote that has imported its stack
    // and answers; starts one in the background when it has none (or its
    // last one ended), so the next start may use it.
    bool ready(const std::string& rootfs);
    // Forks a kernel into the sandbox; returns the host pid of its
    // supervisor (the kernel's parent, outside the sandbox's pid namespace,
    // in its cgroups). Throws launch_error("zygote-fork", …).
    std::int64_t fork_kernel(const std::string& rootfs, const zygote_fork& f);

private:
    struct process;
    std::shared_ptr<process> find(const std::string& rootfs);
    std::filesystem::path log_dir_;
    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<process>> by_image_;
};

}  // namespace cellgate::launcher
