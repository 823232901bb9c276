#pragma once

// Language runtimes for one-shot runs (Piston's /api/v2, /v1/execute's
// `language`): a language, its version and aliases, the scripts that compile
// and run a program, and the kernelspec whose sandboxes run it. The built-in
// ones come from the languages image (images/languages writes them, with the
// versions its toolchains report, to /opt/cellgate/runtimes.json); a
// template that declares a runtime adds its tenant's own.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::core {

struct runtime {
    std::string language;
    std::string version;
    std::vector<std::string> aliases;
    // Piston's "runtime": the toolchain, when a language has several (node, deno); "" otherwise.
    std::string toolchain;
    // Bash scripts run in the workspace: compile gets every file's name as
    // its arguments ("" = none: an interpreted language); run gets the first
    // file's name, then the request's args.
    std::string compile, run;
    std::string kernelspec;  // whose sandboxes run it
    std::string owner;       // the tenant whose template it is; "" = every tenant's
};

// Whether `version` ("3.11.2") satisfies `selector` as Piston's semver does for
// the forms its clients send: "*" or "" (any), an exact version, a prefix with
// or without wildcards ("3", "3.11", "3.x", "3.11.*"), and "^", "~", ">=",
// ">", "<=", "<" before a version.
bool version_matches(std::string_view version, std::string_view selector);

// The runtimes an image declares (runtimes.json: [{language, version,
// aliases, runtime?, compile?, run}]), each run in `kernelspec`. Throws
// std::runtime_error naming what is wrong.
std::vector<runtime> runtimes_from_json(const nlohmann::json& j, const std::string& kernelspec);
// Reads <image_store>/languages/current/rootfs/opt/cellgate/runtimes.json;
// none when the image is not built.
std::vector<runtime> builtin_runtimes(const std::filesystem::path& image_store, const std::string& kernelspec);

class runtime_table {
public:
    void add(runtime r);
    // A template's runtimes change with it: every runtime on `kernelspec` goes.
    void remove_kernelspec(const std::string& kernelspec);

    // What `tenant` may run: the built-in ones and its own, by language, then
    // version (newest first).
    std::vector<runtime> list(const std::string& tenant) const;
    // The newest of `tenant`'s runtimes whose language or an alias is
    // `language` (case-insensitive) and whose version matches `version`.
    std::optional<runtime> find(const std::string& tenant, const std::string& language, const std::string& version) const;

private:
    mutable std::mutex mutex_;
    std::vector<runtime> runtimes_;
};

}  // namespace cellgate::core
