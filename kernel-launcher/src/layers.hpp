#pragma once

// Template layers in the image store (build_step.hpp). Each layer is a
// directory <image_store>/.layers/<id>/ holding
//   diff/      what its step changed, as an overlayfs upper dir (whiteouts
//              included), owned as inside the sandbox (uid 0 is host uid 0,
//              like a built-in image's files)
//   parent     "image <rootfs path>" (a built-in image's build, resolved),
//              "layer <id>", or "base <digest>" (a registry image's root,
//              image_import.cpp: nothing below it)
//   config.json  a registry image's Env, WorkingDir and User (base layers)
//   bytes      what diff/ holds
//   .complete  written last: a layer without it is not one
// and, once a session runs on it, rootfs/: a read-only overlay of its diff
// over its parents' down to the image.

#include "cellgate/launcher/launcher_config.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cellgate::launcher {

std::filesystem::path layers_dir(const launcher_config& config);

// What a layer (or a built-in image) stands on: its lower dirs, the top
// first, ending with the image's rootfs. Throws spec_error for a missing or
// incomplete layer, or a chain deeper than max_layer_depth.
std::vector<std::filesystem::path> layer_lowers(const std::string& parent, const launcher_config& config);

// Where a new layer `id` is made: the store's .layers/ (made if missing);
// launch_error EEXIST when the layer is there already.
std::filesystem::path new_layer_store(const std::string& id, const launcher_config& config, const std::string& step);
// Seals a layer made in `tmp` (its diff/ written): its parent record, its
// size and .complete, then renamed into place as layer `id`; returns its size.
// launch_error EEXIST when another made it meanwhile.
std::uint64_t seal_layer(const std::filesystem::path& tmp, const std::string& id, const std::string& parent,
                         const launcher_config& config, const std::string& step);

// What the regular files under `dir` hold, in bytes.
std::uint64_t files_bytes(const std::filesystem::path& dir);
// `digits` random lower-case hex digits (at most 32), for scratch names.
std::string random_hex(int digits);

// The read-only root of layer `id`, mounted if it is not yet.
std::filesystem::path layer_rootfs(const std::string& id, const launcher_config& config);

// A new directory's mount of `source` whose owners read as shifted by
// `host_id_base` (an idmapped mount: files owned by uid 0 appear owned by
// host_id_base, as the sandbox's root sees its own), at `target`.
void mount_idmapped(const std::filesystem::path& source, const std::filesystem::path& target,
                    std::uint32_t host_id_base);

}  // namespace cellgate::launcher
