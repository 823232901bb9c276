#pragma once

#include "cellgate/launcher/launcher_config.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::launcher {

// Per-node settings: what two cellgate instances on one host must not share.
// Each instance reaps only cgroups under its own parent, and maps sandboxes to
// host ids only in its own range, so neither removes nor aliases the other's
// sandboxes.

// The host ids a configuration hands out: [first, first + count).
struct id_range {
    std::uint64_t first = 0;
    std::uint64_t count = 0;
    std::uint64_t end() const noexcept { return first + count; }
    bool overlaps(const id_range& o) const noexcept { return first < o.end() && o.first < end(); }
};

id_range host_id_range(const launcher_config& cfg);

// One line of /etc/subuid or /etc/subgid ("name:first:count") that overlaps.
struct subid_conflict {
    std::string file;
    std::string owner;
    id_range range;
};

// The entries of a subordinate-id file's text that overlap `range`; lines that
// are not "name:first:count" are skipped (shadow-utils does the same).
std::vector<subid_conflict> subid_overlaps(std::string_view text, const std::string& file, const id_range& range);

// Throws spec_error naming the option when the cgroup parent is not a relative
// path of plain names, or the id range is empty, below 65536 or past 2^32-1;
// and when the range overlaps an entry of cfg.subid_files (users' containers,
// Podman, LXC use those ids: a shared host uid defeats the per-session split).
void check_node_settings(const launcher_config& cfg);

// "--cgroup-parent", "--uid-range-start", "--uid-range-slots" (and
// "--runsc-platform" and "--memory-merge", which are not per node but ride
// along) for the CLIs that take launcher options (cellgate-launch,
// cellgate-launchd); returns false when `name` is none of them. Throws
// spec_error on a bad value.
bool apply_node_option(launcher_config& cfg, const std::string& name, const std::string& value);
bool is_node_option(std::string_view name);
inline constexpr std::string_view node_options_usage =
    "[--cgroup-parent NAME] [--uid-range-start UID] [--uid-range-slots N] [--runsc-platform auto|kvm|ptrace] "
    "[--memory-merge on|off]";

}  // namespace cellgate::launcher
