#pragma once

#include "cellgate/launcher/launcher_config.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <shared_mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::kernels {

// A kernel the gateway offers: Jupyter's kernelspec fields plus how to run it.
struct kernelspec {
    std::string name;
    std::string display_name;
    std::string language = "python";
    std::string image = "python";
    std::string runtime = "runc";
    std::vector<std::string> argv;
    std::string interrupt_mode = "signal";
    launcher::sandbox_limits limits;
    std::vector<std::string> preload;
    // How long a start may take before it is given up (config "start_timeout_s").
    std::chrono::milliseconds start_timeout{30000};
    std::map<std::string, std::filesystem::path> resources;  // "logo-64x64.png" → host file
    // A template's (templates/template_store.hpp): the tenant that owns it
    // ("" for the operator's, which every tenant sees) and its image's
    // environment (its ENV steps).
    std::string owner;
    std::map<std::string, std::string> image_env;
    // Its start command, ready check and the directory they run in
    // (sandbox_spec's): empty for none.
    std::string start_cmd, ready_cmd, start_dir;
    // Started by name but never listed (kernel.json's metadata.cellgate.listed
    // false: the sandboxes of one-shot runs, which take no cells).
    bool listed = true;
    // How long after a cell's reply and idle status its outputs may still
    // come (metadata.cellgate.output_settle_ms: Deno's kernel can publish an
    // execute_result after its idle status); the agent engine waits so long.
    std::chrono::milliseconds output_settle{0};
    // The languages its sandboxes can open code contexts in (E2B's
    // createCodeContext): Python always, and R, JavaScript,
    // TypeScript and Bash where its image has those kernels (the languages
    // image, and templates built on it).
    std::vector<std::string> context_languages;

    // The sandbox that runs kernel `kernel_id` of this spec, with `env`.
    launcher::sandbox_spec to_sandbox_spec(const std::string& kernel_id,
                                           const std::map<std::string, std::string>& env) const;
};

class kernelspec_registry {
public:
    // Reads each spec's kernel.json and logos from its image's rootfs.
    kernelspec_registry(std::vector<kernelspec> specs, std::string default_name,
                        const launcher::launcher_config& launcher_config);

    // The operator's or a template's; a template's pointer stays valid
    // while the registry lives (a removed template is only hidden).
    const kernelspec* find(const std::string& name) const;
    // find(), if `tenant` may see it: the operator's, or its own template's.
    const kernelspec* find_for(const std::string& name, const std::string& tenant) const;
    const std::string& default_name() const noexcept { return default_; }
    // The operator's kernelspecs (templates are not among them).
    const std::map<std::string, kernelspec>& all() const noexcept { return specs_; }

    // A template's kernelspec (its owner set), replacing one of that name;
    // hide() takes it out of every listing and lookup but find() by name
    // (sessions still running on it).
    void add_template(kernelspec spec);
    void hide(const std::string& name);

    // Jupyter's JSON models, as `tenant` sees them.
    nlohmann::json model(const kernelspec& spec) const;
    nlohmann::json models(const std::string& tenant = {}) const;

private:
    std::filesystem::path image_store_;
    std::map<std::string, kernelspec> specs_;
    std::string default_;
    mutable std::shared_mutex templates_mutex_;
    struct template_entry {
        std::vector<std::unique_ptr<kernelspec>> versions;  // the last is current; earlier ones stay for find()
        bool hidden = false;
    };
    std::map<std::string, template_entry> templates_;
};

// The spec every install has: "python3" on the python image under runc.
kernelspec default_python_kernelspec();

// A language as a client names it, the way E2B's server reads it: lower
// case, no blanks, "js" javascript, "ts" typescript, "python3" (or nothing)
// python. The E2B and MCP doors both take their `language` through it.
std::string normalize_language(std::string_view asked);

// The image the built-in language kernels live in (images/languages).
inline constexpr const char* language_image = "languages";

// The languages image's kernelspecs (R, JavaScript and TypeScript on Deno,
// Bash), when that image is in the store: each on it, with `like`'s runtime,
// limits and start timeout. Their names, display names, languages and
// environments come from the image's kernel.json files (the registry reads
// them); none when the image is not built.
std::vector<kernelspec> builtin_language_kernelspecs(const std::filesystem::path& image_store, const kernelspec& like);

}  // namespace cellgate::kernels
