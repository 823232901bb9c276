#include "cgroups.hpp"

#include "host_fs.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <filesystem>
#include <sstream>

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

std::vector<std::string> remove_cgroup(const std::string& cgroups_path) {
    std::vector<std::string> left;
    for (const auto& dir : cgroup_dirs(cgroups_path)) {
        // Children first (a runtime may nest), then the directory itself.
        std::vector<fs::path> subdirs;
        std::error_code ec;
        for (const auto& e : fs::recursive_directory_iterator(dir, ec))
            if (e.is_directory(ec)) subdirs.push_back(e.path());
        std::sort(subdirs.begin(), subdirs.end(),
                  [](const auto& a, const auto& b) { return a.string().size() > b.string().size(); });
        for (const auto& s : subdirs) ::rmdir(s.c_str());
        if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) left.push_back(dir);
    }
    return left;
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
