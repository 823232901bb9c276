#pragma once

// One step of a template's build (sandbox_launcher::run_build_step): a
// command run once, in a sandbox confined like a session's, on a writable
// view of a parent (a built-in image or a layer), whose changes become a new
// layer in the image store. A layer's sessions see it read-only: image name
// "l-<layer id>" in a sandbox_spec.

#include "cellgate/launcher/sandbox_spec.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cellgate::launcher {

// A layer id: 48 lower-case hex digits (the caller's cache key).
bool is_valid_layer_id(std::string_view id);
// The image name a sandbox_spec gives to run on layer `id` (and all below it).
inline std::string layer_image(const std::string& id) { return "l-" + id; }

// Layers below one at most: the overlay's lower directories, and a bound on
// what a template may stack.
inline constexpr std::size_t max_layer_depth = 64;

struct build_step_spec {
    std::string layer;   // the new layer's id; a layer that exists already is an error (EEXIST)
    std::string parent;  // a built-in image's name ("python"), or "l-<id>" of a layer
    // The command, run as is (a caller wanting a shell says sh -c). 1–256
    // arguments, 256 KiB in all, no NUL.
    std::vector<std::string> argv;
    // Inside the sandbox's user namespace. Root there gets the capabilities a
    // package manager needs (chown, setuid to its own users, …), in that
    // namespace only; any other uid gets none.
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::string cwd = "/";
    std::map<std::string, std::string> env;  // over PATH, HOME, LANG; no CELLGATE_ prefix
    sandbox_limits limits;
    std::chrono::milliseconds timeout{600000};
    // What the step may write (its layer, and what it deletes or changes of
    // the layers below): a file system of this size, 64 MiB to the largest
    // workspace a spec may ask for; past it the step gets ENOSPC.
    std::uint64_t disk_bytes = 8ull << 30;
    // As sandbox_spec::egress_dir: the egress proxy's socket at /run/egress
    // (the step's allow-list is the caller's to set there); empty: loopback only.
    std::string egress_dir;
};

struct build_step_result {
    int exit_code = -1;          // the command's; -1 when killed (a signal, or timed out)
    bool timed_out = false;
    std::string output;          // stdout and stderr as they interleaved: the last 64 KiB
    std::uint64_t layer_bytes = 0;  // what the new layer holds (0 unless exit_code is 0)
    double ms = 0;
};

// A registry image as a base layer (sandbox_launcher::import_image): pulled
// with skopeo, unpacked with umoci as the image's own ids, and given what a
// sandbox needs of cellgate where the image lacks it (its entry points and
// tini from the built-in python image, the mount points, the kernel's user,
// /home/user). Its sessions and steps still need the image's own Python 3
// (and ipykernel, for sessions). The layer's config.json keeps the image
// config's Env, WorkingDir and User.
struct image_import_spec {
    std::string layer;      // the new layer's id; a layer that exists already is an error (EEXIST)
    // "host[:port]/repository[:tag|@sha256:<hex>]", at most 512 bytes. The
    // caller decides which registries may be named.
    std::string reference;
    bool tls_verify = true;                 // false: a plain-HTTP registry
    std::uint64_t disk_bytes = 8ull << 30;  // what the pulled image and its root may take together
    std::chrono::milliseconds timeout{600000};
};

struct image_import_result {
    std::string digest;                      // the manifest's, "sha256:…"
    std::map<std::string, std::string> env;  // the image config's Env
    std::string workdir, user;               // its WorkingDir and User ("" when unset)
    bool python_added = false;               // it had no Python able to run the kernel: cellgate's was added
    std::uint64_t layer_bytes = 0;
    double ms = 0;
};

bool is_valid_image_reference(std::string_view ref);

void to_json(nlohmann::json& j, const image_import_spec& s);
void from_json(const nlohmann::json& j, image_import_spec& s);
void to_json(nlohmann::json& j, const image_import_result& r);
void from_json(const nlohmann::json& j, image_import_result& r);

void to_json(nlohmann::json& j, const build_step_spec& s);
void from_json(const nlohmann::json& j, build_step_spec& s);
void to_json(nlohmann::json& j, const build_step_result& r);
void from_json(const nlohmann::json& j, build_step_result& r);

}  // namespace cellgate::launcher
