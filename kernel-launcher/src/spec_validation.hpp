#pragma once

#include "cellgate/launcher/launcher_config.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace cellgate::launcher {

// Throws spec_error naming the first thing wrong with `spec`. Pure apart from
// resolving the image name in the store (a directory lookup).
void validate_spec(const sandbox_spec& spec, const launcher_config& config);

// The checks validate_spec is made of, exposed for reuse and tests.
bool is_valid_sandbox_id(std::string_view id);
bool is_valid_image_name(std::string_view name);
bool env_name_allowed(std::string_view name, const launcher_config& config);

// A sandbox's (or a build step's) limits within config.max_limits, and an
// egress dir directly under config.egress_root ("" is none); spec_error.
void validate_limits(const sandbox_limits& limits, const launcher_config& config);
// An image's own environment (sandbox_spec::image_env, a build step's env):
// shell-like names, none of the launcher's (CELLGATE_*), no NUL, 256 names
// and 128 KiB at most.
void validate_image_env(const std::map<std::string, std::string>& env);
void validate_egress_dir(const std::string& egress_dir, const launcher_config& config);

// <image_store>/<name>/current/rootfs, resolved, or for "l-<layer id>" the
// layer's read-only root (layers.hpp, mounted on first use); throws
// spec_error if absent.
std::filesystem::path resolve_image(std::string_view name, const launcher_config& config);

// The workspace dir a spec ends up with: its own, or <root>/<id>.
std::filesystem::path workspace_for(const sandbox_spec& spec, const std::string& id,
                                    const launcher_config& config);

// RLIMIT_FSIZE that applies: the spec's, or the larger of workspace and /tmp.
std::uint64_t effective_fsize(const sandbox_limits& limits);

}  // namespace cellgate::launcher
