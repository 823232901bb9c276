#include "cgroups.hpp"

#include "host_fs.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <filesystem>
#include <sstream>
#include <thread>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

const fs::path cgroup_root = "/sys/fs/cgroup";

// Every hierarchy's mount: the v1 controllers, and the v2 tree (the root on a
// pure v2 host, "unified" on a hybrid one).
std::vector<fs::path> hierarchies() {
    std::vector<fs::path> out;
    std::error_code ec;
    if (fs::exists(cgroup_root / "cgroup.controllers", ec)) return {cgroup_root};
    for (const auto& entry : fs::directory_iterator(cgroup_root, ec))
        if (entry.is_directory(ec) && !entry.is_symlink(ec)) out.push_back(entry.path());
    return out;
}

std::uint64_t read_number(const fs::path& p) {
    const auto text = read_file(p, 64);
    try {
        return text.empty() || text[0] == 'm' ? 0 : std::stoull(text);
    } catch (...) {
        return 0;
    }
}

std::uint64_t read_key(const fs::path& p, const std::string& key) {
    std::istringstream in(read_file(p, 4096));
    std::string k;
    std::uint64_t v = 0;
    while (in >> k >> v)
        if (k == key) return v;
    return 0;
}

}  // namespace

cgroup_usage read_cgroup(const std::string& cgroups_path) {
    cgroup_usage u;
    std::error_code ec;
    const fs::path rel = fs::path(cgroups_path).relative_path();
    if (fs::exists(cgroup_root / "cgroup.controllers", ec)) {
        const auto dir = cgroup_root / rel;
        u.exists = fs::exists(dir, ec);
        u.oom_killed = read_key(dir / "memory.events", "oom_kill") > 0;
        u.memory_bytes = read_number(dir / "memory.current");
        u.pids = static_cast<std::uint32_t>(read_number(dir / "pids.current"));
        return u;
    }
    const auto mem = cgroup_root / "memory" / rel;
    u.exists = fs::exists(mem, ec);
    u.oom_killed = read_key(mem / "memory.oom_control", "oom_kill") > 0;
    u.memory_bytes = read_number(mem / "memory.usage_in_bytes");
    u.pids = static_cast<std::uint32_t>(read_number(cgroup_root / "pids" / rel / "pids.current"));
    return u;
}

std::vector<std::string> cgroup_dirs(const std::string& cgroups_path) {
    std::vector<std::string> out;
    std::error_code ec;
    const fs::path rel = fs::path(cgroups_path).relative_path();
    for (const auto& h : hierarchies())
        if (fs::is_directory(h / rel, ec)) out.push_back((h / rel).string());
    return out;
}

namespace {

// Children first (a runtime may nest), then the directory itself.
bool remove_tree(const fs::path& dir) {
    std::vector<fs::path> subdirs;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec))
        if (e.is_directory(ec)) subdirs.push_back(e.path());
    std::sort(subdirs.begin(), subdirs.end(),
              [](const auto& a, const auto& b) { return a.string().size() > b.string().size(); });
    for (const auto& s : subdirs) ::rmdir(s.c_str());
    return ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
}

// SIGKILLs what is still in the sandbox's cgroup once its runtime has let go
// of it (gVisor's gofer and ptrace stubs can outlive an OOM-killed sentry for
// a moment). Each pid is pinned with a pidfd and checked to still be in this
// sandbox's cgroup before the signal, so a recycled pid is never hit.
void kill_stragglers(const fs::path& dir, const std::string& cgroups_path) {
    std::vector<fs::path> dirs = {dir};
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec))
        if (e.is_directory(ec)) dirs.push_back(e.path());
    for (const auto& d : dirs) {
        std::istringstream procs(read_file(d / "cgroup.procs", 1 << 16));
        for (long pid; procs >> pid;) {
            const int pidfd = pidfd_open(pid);
            if (pidfd < 0) continue;
            const auto cgroups = read_file("/proc/" + std::to_string(pid) + "/cgroup", 8192);
            if (cgroups.find(cgroups_path + "\n") != std::string::npos ||
                cgroups.find(cgroups_path + "/") != std::string::npos)
                ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
            ::close(pidfd);
        }
    }
}

}  // namespace

std::vector<std::string> remove_cgroup(const std::string& cgroups_path, bool kill_busy) {
    std::vector<std::string> left;
    for (const auto& dir : cgroup_dirs(cgroups_path)) {
        if (remove_tree(dir)) continue;
        if (!kill_busy) {
            left.push_back(dir);
            continue;
        }
        // Busy: whatever is left there belongs to the sandbox being removed.
        bool removed = false;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (!removed && std::chrono::steady_clock::now() < deadline) {
            kill_stragglers(dir, cgroups_path);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            removed = remove_tree(dir);
        }
        if (!removed) left.push_back(dir);
    }
    return left;
}

std::optional<sandbox_usage> read_usage(const std::string& cgroups_path, bool reset_peak) {
    std::error_code ec;
    const fs::path rel = fs::path(cgroups_path).relative_path();
    auto write = [](const fs::path& file, const char* value) {
        std::ofstream out(file);
        out << value;
        out.flush();
        return static_cast<bool>(out);
    };
    sandbox_usage u;
    if (fs::exists(cgroup_root / "cgroup.controllers", ec)) {
        const auto dir = cgroup_root / rel;
        if (!fs::exists(dir, ec)) return std::nullopt;
        if (reset_peak) u.peak_resettable = write(dir / "memory.peak", "reset\n");
        u.cpu_ns = read_key(dir / "cpu.stat", "usage_usec") * 1000;
        u.memory_bytes = read_number(dir / "memory.current");
        u.memory_peak_bytes = read_number(dir / "memory.peak");
        return u;
    }
    const auto mem = cgroup_root / "memory" / rel;
    if (!fs::exists(mem, ec)) return std::nullopt;
    u.peak_resettable = !reset_peak || write(mem / "memory.max_usage_in_bytes", "0");
    u.cpu_ns = read_number(cgroup_root / "cpuacct" / rel / "cpuacct.usage");
    u.memory_bytes = read_number(mem / "memory.usage_in_bytes");
    u.memory_peak_bytes = read_number(mem / "memory.max_usage_in_bytes");
    return u;
}

bool write_cpu_shares(const std::string& cgroups_path, std::uint32_t shares) {
    std::error_code ec;
    const fs::path rel = fs::path(cgroups_path).relative_path();
    fs::path file;
    std::string value;
    if (fs::exists(cgroup_root / "cgroup.controllers", ec)) {
        file = cgroup_root / rel / "cpu.weight";
        // The kernel's own mapping from shares (2…262144) to weight (1…10000).
        value = std::to_string(1 + ((static_cast<std::uint64_t>(shares) - 2) * 9999) / 262142);
    } else {
        file = cgroup_root / "cpu" / rel / "cpu.shares";
        value = std::to_string(shares);
    }
    std::ofstream out(file);
    out << value;
    out.flush();
    return static_cast<bool>(out);
}

std::vector<std::string> cgroup_children(const std::string& parent) {
    std::vector<std::string> out;
    std::error_code ec;
    const fs::path rel = fs::path(parent).relative_path();
    for (const auto& h : hierarchies())
        for (const auto& e : fs::directory_iterator(h / rel, ec))
            if (e.is_directory(ec)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

}  // namespace cellgate::launcher
