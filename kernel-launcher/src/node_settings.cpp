#include "cellgate/launcher/node_settings.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "host_fs.hpp"

#include <cctype>
#include <charconv>

namespace cellgate::launcher {

namespace {

constexpr std::uint64_t ids_per_slot = 65536;

bool plain_name(std::string_view part) {
    if (part.empty() || part == "." || part == ".." || part.size() > 64) return false;
    for (const char c : part)
        if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.')) return false;
    return true;
}

void check_cgroup_parent(const std::string& parent) {
    // Relative to the cgroup root, a few levels of plain names: never "..",
    // never absolute, never a cgroup interface file's dotted name alone.
    std::string_view rest = parent;
    int levels = 0;
    for (;;) {
        const auto slash = rest.find('/');
        if (!plain_name(rest.substr(0, slash)) || ++levels > 4)
            throw spec_error("--cgroup-parent must be 1-4 names of [A-Za-z0-9._-] joined by '/', not '" +
                             parent.substr(0, 128) + "'");
        if (slash == std::string_view::npos) return;
        rest.remove_prefix(slash + 1);
    }
}

std::uint64_t parse_number(std::string_view text, const std::string& what) {
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
        throw spec_error(what + " needs a non-negative whole number, not '" + std::string(text.substr(0, 32)) + "'");
    return n;
}

}  // namespace

id_range host_id_range(const launcher_config& cfg) {
    return {cfg.host_id_base, std::uint64_t{cfg.max_slots} * ids_per_slot};
}

std::vector<subid_conflict> subid_overlaps(std::string_view text, const std::string& file, const id_range& range) {
    std::vector<subid_conflict> out;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const auto line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        const auto a = line.find(':');
        const auto b = a == std::string_view::npos ? a : line.find(':', a + 1);
        if (b == std::string_view::npos || line.empty() || line[0] == '#') continue;
        id_range r;
        const auto first = line.substr(a + 1, b - a - 1), count = line.substr(b + 1);
        if (std::from_chars(first.data(), first.data() + first.size(), r.first).ptr != first.data() + first.size() ||
            std::from_chars(count.data(), count.data() + count.size(), r.count).ptr != count.data() + count.size() ||
            first.empty() || count.empty())
            continue;
        if (r.overlaps(range)) out.push_back({file, std::string(line.substr(0, a)), r});
    }
    return out;
}

void check_node_settings(const launcher_config& cfg) {
    check_cgroup_parent(cfg.cgroup_parent);
    const auto range = host_id_range(cfg);
    // Below 65536 are the host's own users and groups (and nobody, 65534).
    if (range.count == 0 || range.first < ids_per_slot || range.end() > 0xFFFFFFFFull)
        throw spec_error("--uid-range-start " + std::to_string(range.first) + " with --uid-range-slots " +
                         std::to_string(cfg.max_slots) + " must lie within 65536 … 4294967294");
    for (const auto& file : cfg.subid_files) {
        const auto text = read_file(file, 1u << 20);
        for (const auto& c : subid_overlaps(text, file.string(), range))
            throw spec_error("the host id range " + std::to_string(range.first) + "…" + std::to_string(range.end() - 1) +
                             " overlaps " + c.file + " (" + c.owner + ": " + std::to_string(c.range.first) + "…" +
                             std::to_string(c.range.end() - 1) + "); choose another --uid-range-start");
    }
}

bool is_node_option(std::string_view name) {
    return name == "--cgroup-parent" || name == "--uid-range-start" || name == "--uid-range-slots" ||
           name == "--runsc-platform" || name == "--memory-merge" || name == "--zygote";
}

bool apply_node_option(launcher_config& cfg, const std::string& name, const std::string& value) {
    if (name == "--cgroup-parent") cfg.cgroup_parent = value;
    else if (name == "--uid-range-start") {
        const auto n = parse_number(value, name);
        if (n > 0xFFFFFFFFull) throw spec_error(name + " is past 2^32-1");
        cfg.host_id_base = static_cast<std::uint32_t>(n);
    } else if (name == "--runsc-platform") {
        if (value != "auto" && value != "kvm" && value != "ptrace" && value != "systrap")
            throw spec_error(name + " must be auto, kvm, ptrace or systrap");
        cfg.runsc_platform = value;
    } else if (name == "--memory-merge") {
        if (value != "on" && value != "off") throw spec_error(name + " must be on or off");
        cfg.memory_merge = value == "on";
    } else if (name == "--zygote") {
        if (value != "on" && value != "off") throw spec_error(name + " must be on or off");
        cfg.zygote = value == "on";
    } else if (name == "--uid-range-slots") {
        const auto n = parse_number(value, name);
        if (n == 0 || n > 65536) throw spec_error(name + " must be 1…65536");
        cfg.max_slots = static_cast<std::uint32_t>(n);
    } else
        return false;
    return true;
}

}  // namespace cellgate::launcher
