#pragma once

#include "cellgate/launcher/launcher_config.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
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

    // The sandbox that runs kernel `kernel_id` of this spec, with `env`.
    launcher::sandbox_spec to_sandbox_spec(const std::string& kernel_id,
                                           const std::map<std::string, std::string>& env) const;
};

class kernelspec_registry {
public:
    // Reads each spec's kernel.json and logos from its image's rootfs.
    kernelspec_registry(std::vector<kernelspec> specs, std::string default_name,
                        const launcher::launcher_config& launcher_config);

    const kernelspec* find(const std::string& name) const;
    const std::string& default_name() const noexcept { return default_; }
    const std::map<std::string, kernelspec>& all() const noexcept { return specs_; }

    // Jupyter's JSON models.
    nlohmann::json model(const kernelspec& spec) const;
    nlohmann::json models() const;

private:
    std::map<std::string, kernelspec> specs_;
    std::string default_;
};

// The spec every install has: "python3" on the python image under runc.
kernelspec default_python_kernelspec();

}  // namespace cellgate::kernels
