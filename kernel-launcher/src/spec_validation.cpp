#include "spec_validation.hpp"

#include "layers.hpp"
#include "cellgate/launcher/build_step.hpp"

#include "cellgate/launcher/env_rules.hpp"
#include "cellgate/launcher/launch_error.hpp"

#include <algorithm>
#include <system_error>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string human_bytes(std::uint64_t b) {
    if (b >= (1ull << 30) && b % (1ull << 30) == 0) return std::to_string(b >> 30) + " GiB";
    if (b >= (1ull << 20) && b % (1ull << 20) == 0) return std::to_string(b >> 20) + " MiB";
    return std::to_string(b) + " bytes";
}

template <typename T>
void check_range(const char* what, T value, T min, T max, bool bytes) {
    if (value >= min && value <= max) return;
    auto show = [bytes](T v) {
        return bytes ? human_bytes(static_cast<std::uint64_t>(v)) : std::to_string(v);
    };
    throw spec_error(std::string(what) + " of " + show(value) + " is outside the allowed range " +
                     show(min) + " … " + show(max));
}

bool is_module_name(std::string_view m) {
    if (m.empty() || m.size() > 128 || m.front() == '.' || m.back() == '.') return false;
    if (m.front() >= '0' && m.front() <= '9') return false;
    return std::all_of(m.begin(), m.end(), [](char c) { return is_word_char(c) || c == '.'; });
}

}  // namespace

bool is_valid_sandbox_id(std::string_view id) {
    if (id.empty() || id.size() > 64 || !is_word_char(id.front()) || id.front() == '_') return false;
    return std::all_of(id.begin(), id.end(), [](char c) { return is_word_char(c) || c == '-'; });
}

bool is_valid_image_name(std::string_view name) {
    if (name.empty() || name.size() > 64) return false;
    if (!((name.front() >= 'a' && name.front() <= 'z') || (name.front() >= '0' && name.front() <= '9')))
        return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    });
}

bool env_name_allowed(std::string_view name, const launcher_config& config) {
    if (name.empty() || name.size() > 128 || (name.front() >= '0' && name.front() <= '9'))
        return false;
    if (!std::all_of(name.begin(), name.end(), is_word_char)) return false;
    for (const auto& pattern : config.env_allow) {
        if (!pattern.empty() && pattern.back() == '*') {
            const std::string_view prefix(pattern.data(), pattern.size() - 1);
            if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix) return true;
        } else if (name == pattern) {
            return true;
        }
    }
    return false;
}

fs::path resolve_image(std::string_view name, const launcher_config& config) {
    if (name.starts_with("l-") && is_valid_layer_id(name.substr(2))) return layer_rootfs(std::string(name.substr(2)), config);
    if (!is_valid_image_name(name))
        throw spec_error("image name '" + std::string(name) +
                         "' is not valid (lower-case letters, digits, '-', '_', '.')");
    const fs::path rootfs = config.image_store / std::string(name) / "current" / "rootfs";
    std::error_code ec;
    const fs::path resolved = fs::canonical(rootfs, ec);
    if (ec || !fs::is_directory(resolved / "usr", ec))
        throw spec_error("unknown image '" + std::string(name) + "': no built rootfs at " +
                         rootfs.string() + " (run images/build.sh " + std::string(name) + ")");
    return resolved;
}

fs::path workspace_for(const sandbox_spec& spec, const std::string& id,
                       const launcher_config& config) {
    if (!spec.workspace_dir.empty()) return fs::path(spec.workspace_dir);
    return config.workspace_root / id;
}

std::uint64_t effective_fsize(const sandbox_limits& limits) {
    return limits.fsize_bytes != 0 ? limits.fsize_bytes
                                   : std::max(limits.workspace_bytes, limits.tmp_bytes);
}

void validate_env(const std::map<std::string, std::string>& env, const launcher_config& config) {
    if (env.size() > 256) throw spec_error("too many environment variables (max 256)");
    std::size_t env_bytes = 0;
    for (const auto& [name, value] : env) {
        if (!env_name_allowed(name, config))
            throw spec_error("environment variable '" + name.substr(0, 64) + "' is not on the allow-list");
        if (value.size() > 4096 || value.find('\0') != std::string::npos)
            throw spec_error("environment variable '" + name.substr(0, 64) +
                             "' has a value that is too long or holds a NUL byte");
        env_bytes += name.size() + value.size();
    }
    if (env_bytes > (64u << 10)) throw spec_error("environment is larger than 64 KiB");
}

void validate_limits(const sandbox_limits& l, const launcher_config& config) {
    const auto& max = config.max_limits;
    check_range<std::uint64_t>("memory limit", l.memory_bytes, 64ull << 20, max.memory_bytes, true);
    check_range<std::uint32_t>("pids limit", l.pids, 8, max.pids, false);
    check_range<std::uint32_t>("cpu_millis", l.cpu_millis, 10, max.cpu_millis, false);
    check_range<std::uint64_t>("workspace size", l.workspace_bytes, 8ull << 20,
                               max.workspace_bytes, true);
    check_range<std::uint64_t>("/tmp size", l.tmp_bytes, 1ull << 20, max.tmp_bytes, true);
    check_range<std::uint32_t>("nofile limit", l.nofile, 64, max.nofile, false);
    check_range<std::uint32_t>("cpu_shares", l.cpu_shares, 2, 262144, false);
    if (l.fsize_bytes != 0)
        check_range<std::uint64_t>("fsize limit", l.fsize_bytes, 1ull << 20, max.fsize_bytes, true);

}

void validate_image_env(const std::map<std::string, std::string>& env) {
    if (env.size() > 256) throw spec_error("an image's environment has at most 256 names");
    std::size_t bytes = 0;
    for (const auto& [name, value] : env) {
        const bool word = !name.empty() && name.size() <= 128 && !(name[0] >= '0' && name[0] <= '9') &&
                          std::all_of(name.begin(), name.end(), is_word_char);
        if (!word || name.starts_with("CELLGATE_"))
            throw spec_error("environment variable '" + name.substr(0, 64) + "' is not a name an image may set");
        if (value.find('\0') != std::string::npos) throw spec_error("an environment value holds a NUL byte");
        bytes += name.size() + value.size();
    }
    if (bytes > (128u << 10)) throw spec_error("an image's environment is larger than 128 KiB");
}

void validate_egress_dir(const std::string& egress_dir, const launcher_config& config) {
    if (egress_dir.empty()) return;
    const fs::path p(egress_dir);
    if (config.egress_root.empty()) throw spec_error("this launcher gives no sandbox an egress path");
    if (!p.is_absolute() || p.lexically_normal() != p || egress_dir.find("/.") != std::string::npos ||
        egress_dir.find("//") != std::string::npos || p.parent_path() != config.egress_root ||
        !is_valid_sandbox_id(p.filename().string()))
        throw spec_error("egress_dir must be a directory directly under " + config.egress_root.string() +
                         " with a simple name");
}

void validate_spec(const sandbox_spec& spec, const launcher_config& config) {
    if (!spec.id.empty() && !is_valid_sandbox_id(spec.id))
        throw spec_error("sandbox id '" + spec.id +
                         "' is not valid (1-64 of letters, digits, '-', '_', starting with a "
                         "letter or digit)");
    resolve_image(spec.image, config);

    validate_limits(spec.limits, config);
    validate_image_env(spec.image_env);
    for (const auto* cmd : {&spec.start_cmd, &spec.ready_cmd})
        if (cmd->size() > (64u << 10) || cmd->find('\0') != std::string::npos)
            throw spec_error("a start command or ready check is at most 64 KiB, without NUL bytes");
    if (!spec.start_dir.empty()) {
        const fs::path d(spec.start_dir);
        if (spec.start_dir.size() > 4096 || !d.is_absolute() || d.lexically_normal() != d ||
            spec.start_dir.find('\0') != std::string::npos)
            throw spec_error("start_dir is an absolute, normalised path");
    }

    if (!spec.workspace_dir.empty()) {
        const fs::path p(spec.workspace_dir);
        if (!p.is_absolute()) throw spec_error("workspace_dir must be an absolute path");
        if (p.lexically_normal() != p || spec.workspace_dir.find("/.") != std::string::npos ||
            spec.workspace_dir.find("//") != std::string::npos)
            throw spec_error("workspace_dir must be a normalised path without '.' or '..'");
        if (p.parent_path() != config.workspace_root || !is_valid_sandbox_id(p.filename().string()))
            throw spec_error("workspace_dir must be a directory directly under " +
                             config.workspace_root.string() + " with a simple name");
    }

    validate_egress_dir(spec.egress_dir, config);

    if (spec.volumes.size() > 8) throw spec_error("at most 8 volumes per sandbox");
    for (std::size_t i = 0; i < spec.volumes.size(); ++i) {
        const auto& v = spec.volumes[i];
        if (!is_valid_sandbox_id(v.volume)) throw spec_error("a volume id has 1 to 64 letters, digits, '-' and '_'");
        const std::string prefix = "/volumes/";
        if (!v.path.starts_with(prefix) || !is_valid_sandbox_id(v.path.substr(prefix.size())))
            throw spec_error("a volume's path is /volumes/<name> (letters, digits, '-' and '_'): '" +
                             v.path.substr(0, 100) + "'");
        for (std::size_t j = 0; j < i; ++j)
            if (spec.volumes[j].path == v.path || spec.volumes[j].volume == v.volume)
                throw spec_error("a volume, and a path, may appear once per sandbox");
    }
    if (!spec.from_snapshot.empty() && !is_valid_sandbox_id(spec.from_snapshot))
        throw spec_error("from_snapshot must be a snapshot name (1 to 64 letters, digits, '-' and '_')");

    validate_env(spec.env, config);

    if (spec.uid == 0 || spec.gid == 0)
        throw spec_error("the kernel must not run as uid or gid 0 inside the sandbox");
    if (spec.uid > 65533 || spec.gid > 65533)
        throw spec_error("uid and gid must be below 65534 (the sandbox maps 65536 ids)");

    if (spec.preload.size() > 32) throw spec_error("too many preload modules (max 32)");
    for (const auto& m : spec.preload)
        if (!is_module_name(m)) throw spec_error("preload entry '" + m + "' is not a module name");

    if (spec.start_timeout < std::chrono::seconds(1) || spec.start_timeout > std::chrono::minutes(10))
        throw spec_error("start_timeout must be between 1 s and 10 min");
}

}  // namespace cellgate::launcher
