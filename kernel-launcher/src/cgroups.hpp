#pragma once

#include "cellgate/launcher/sandbox_info.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::launcher {

// Reads and cleans the cgroups the OCI runtime made for a sandbox at
// `cgroups_path` ("/cellgate/<id>"), on cgroup v1, v2 or a hybrid of both.
struct cgroup_usage {
    bool exists = false;
    bool oom_killed = false;
    std::uint64_t memory_bytes = 0;
    std::uint32_t pids = 0;
};

cgroup_usage read_cgroup(const std::string& cgroups_path);
// Directories for `cgroups_path` that still exist, in every hierarchy.
std::vector<std::string> cgroup_dirs(const std::string& cgroups_path);
// Removes them (they must be empty of tasks); returns what could not be removed.
// `kill_busy`: a busy cgroup's processes are SIGKILLed first. Only for the
// sandbox being removed; never for cgroups found while reaping, which may
// belong to another launcher instance sharing the hierarchy.
std::vector<std::string> remove_cgroup(const std::string& cgroups_path, bool kill_busy = false);
// The CPU time and memory peak of the cgroup (nothing when it is gone); with
// `reset_peak`, the peak is first set back to the current use where the
// kernel allows it (v1's memory.max_usage_in_bytes, v2's memory.peak on 6.12+).
std::optional<sandbox_usage> read_usage(const std::string& cgroups_path, bool reset_peak);
// Writes a relative CPU weight (v1 cpu.shares; v2 cpu.weight, converted).
bool write_cpu_shares(const std::string& cgroups_path, std::uint32_t shares);
// Child names under `parent` ("/cellgate") in any hierarchy.
std::vector<std::string> cgroup_children(const std::string& parent);

}  // namespace cellgate::launcher
