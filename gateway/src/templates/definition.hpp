#pragma once

// A template as a tenant defines it (POST /v1/templates), and the plan a
// build runs: pure, so the unit tests and the HTTP fuzz target run exactly
// the server's rules.
//
// A template is a base (a built-in image, or another template of the
// tenant's) and ordered steps: RUN (a shell command, as root or the sandbox
// user), COPY (from a tar archive the tenant uploaded, template_files.hpp),
// ENV, WORKDIR, USER. A `packages` map expands into RUN steps ahead
// of the given ones, always in the order apt, pip, npm. Each RUN makes a
// layer, keyed by the tenant, the layer below, the step and the state it
// runs in (environment, directory, user): the same step on the same layer is
// built once, and a changed step rebuilds from itself on.

#include "cellgate/launcher/build_step.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::templates {

struct step {
    std::string type;               // RUN, COPY, ENV, WORKDIR, USER
    // RUN: [command, user?]; COPY: [source, destination, owner?, mode?];
    // ENV: [name, value, …]; WORKDIR: [dir]; USER: [user]
    std::vector<std::string> args;
    bool force = false;             // rebuilt even when its layer exists
    std::string files;              // COPY: the key of the tenant's uploaded archive it copies from
    std::string digest;             // COPY: that archive's SHA-256, found by the build (never the client's)
};

// Where a COPY step finds its archive inside the build sandbox.
std::string copy_archive_path(std::size_t step_index);

struct definition {
    std::string name;            // [a-z0-9][a-z0-9_-]{0,62}
    std::string tag = "latest";  // [A-Za-z0-9_.-]{1,64}
    // "python" (the data image, the default), another built-in image's name
    // ("debian"), "template:<name>:<tag>" of the tenant's, or
    // "oci:<host[:port]/repository[:tag]>" (an image in a registry the
    // operator allows).
    std::string base = "python";
    std::vector<step> steps;  // packages already expanded in front
    std::optional<std::string> start_cmd, ready_cmd;
    std::optional<std::uint32_t> cpu_millis;
    std::optional<std::uint64_t> memory_bytes, workspace_bytes;
    std::vector<std::string> preload;  // Python modules the kernel imports before its first cell
    std::uint32_t pool = 0;            // warm sandboxes kept for it
    // How long a sandbox's start may take, its ready check included (1 to 300 s); unset: the gateway's.
    std::optional<std::uint32_t> start_timeout_s;
    bool force = false;                // every step rebuilt
    // One-shot runtimes it offers its tenant (Piston's /api/v2, /v1/execute's
    // language): [{language, version, aliases?, compile?, run}], checked
    // here; run in this template's sandboxes.
    nlohmann::json runtimes = nlohmann::json::array();
};

// What the build needs from outside: the operator's package indexes.
struct build_settings {
    std::string pip_index_url;
    std::string npm_registry_url;
};

// Parses POST /v1/templates' body (strict: an unknown field, a wrong type, a
// bad name or a step past the bounds is an api_exception(400) saying which).
definition parse_definition(const nlohmann::json& body, const build_settings& settings);

// "name" or "name:tag" → {name, tag}; nullopt when either part is not valid.
std::optional<std::pair<std::string, std::string>> parse_reference(const std::string& ref);
bool valid_template_name(const std::string& name);
// A body's "tags": 1 to 16 valid tags, each kept once, in order; api_exception(400) otherwise.
std::vector<std::string> parse_tags(const nlohmann::json& tags);
// A step as one line of at most 200 bytes ("RUN pip install …"), as logs and
// a build's model show it.
std::string summary_of(const step& s);
bool valid_tag(const std::string& tag);

// One step of a build as it will run: layer steps carry their launcher spec
// (its limits, time and egress are the builder's to fill in).
struct planned_step {
    std::size_t index = 0;   // in the definition's steps
    std::string type;
    std::string summary;     // "RUN pip install duckdb" (cut at 200 bytes)
    bool makes_layer = false;
    launcher::build_step_spec spec;  // layer, parent, argv, uid, gid, env
};

struct plan {
    std::vector<planned_step> steps;
    std::string image;                        // what its sessions run on: "l-<id>" or the base's image
    std::vector<std::string> layers;          // the layer ids it makes, bottom first
    std::map<std::string, std::string> env;   // after every ENV step
    std::string workdir = "/";
    std::string user = "root";
    std::vector<std::size_t> copies;  // the steps that unpack an archive (copy_archive_path)
};

// The plan for `d`, owned by `tenant`, over a base whose image is
// `base_image` ("python", or a template's "l-<id>") and whose identity is
// `base_identity` (the built image's resolved path, or the template's top
// layer) with that base's environment, WORKDIR and USER (a registry image's
// WorkingDir and User, a template's last). `nonce` is mixed into the keys from
// the first forced step on (a forced step gets new layers).
plan make_plan(const definition& d, const std::string& tenant, const std::string& base_image,
               const std::string& base_identity, const std::map<std::string, std::string>& base_env,
               const std::string& nonce, const std::string& base_workdir = "/", const std::string& base_user = "root");

// The kernelspec name of a tenant's template: distinct per tenant, so no
// tenant learns another's names (the display name is "name:tag").
std::string kernelspec_name(const std::string& tenant, const std::string& name, const std::string& tag);

nlohmann::json to_json(const definition& d);

// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s);
// The host pip must be told to trust for a plain-HTTP index URL (its login
// and port left out); "" for an https:// one, which needs no telling.
std::string pip_trusted_host(const std::string& index_url);

}  // namespace cellgate::templates
