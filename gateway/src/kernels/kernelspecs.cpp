#include "kernels/kernelspecs.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <fstream>

namespace cellgate::kernels {
namespace fs = std::filesystem;

launcher::sandbox_spec kernelspec::to_sandbox_spec(const std::string& kernel_id,
                                                   const std::map<std::string, std::string>& env) const {
    launcher::sandbox_spec spec;
    spec.id = kernel_id;
    spec.image = image;
    spec.runtime = runtime;
    spec.limits = limits;
    spec.preload = preload;
    spec.start_timeout = start_timeout;
    spec.env = env;
    spec.image_env = image_env;
    spec.start_cmd = start_cmd;
    spec.ready_cmd = ready_cmd;
    spec.start_dir = start_dir;
    return spec;
}

std::string normalize_language(std::string_view asked) {
    std::string l;
    for (const char ch : asked)
        if (ch != ' ' && ch != '\t') l += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (l == "js") return "javascript";
    if (l == "ts") return "typescript";
    if (l == "python3" || l.empty()) return "python";
    return l;
}

kernelspec default_python_kernelspec() {
    kernelspec k;
    k.name = "python3";
    k.display_name = "Python 3 (cellgate sandbox)";
    k.argv = {"/opt/cellgate/cellgate-kernel", "-f", "{connection_file}"};
    return k;
}

namespace {

// What code contexts an image's sandboxes can open: Python (as always), and
// where the languages image's entry point is, each language whose kernel it
// has.
std::vector<std::string> context_languages_of(const fs::path& rootfs) {
    std::error_code ec;
    std::vector<std::string> out{"python"};
    if (!fs::is_regular_file(rootfs / "opt/cellgate/cellgate-kernel-python", ec)) return out;
    const fs::path kernels = rootfs / "usr/local/share/jupyter/kernels";
    for (const auto& [dir, language] : {std::pair{"ir", "r"}, {"javascript", "javascript"}, {"typescript", "typescript"},
                                        {"bash", "bash"}})
        if (fs::is_regular_file(kernels / dir / "kernel.json", ec)) out.emplace_back(language);
    return out;
}

}  // namespace

std::vector<kernelspec> builtin_language_kernelspecs(const fs::path& image_store, const kernelspec& like) {
    std::vector<kernelspec> out;
    const fs::path kernels = image_store / language_image / "current" / "rootfs/usr/local/share/jupyter/kernels";
    std::error_code ec;
    for (fs::directory_iterator it(kernels, ec), end; !ec && it != end; it.increment(ec)) {
        const auto name = it->path().filename().string();
        if (name == "python3" || !fs::is_regular_file(it->path() / "kernel.json", ec)) continue;
        kernelspec k;
        k.name = name;
        k.image = language_image;
        k.runtime = like.runtime;
        k.limits = like.limits;
        k.start_timeout = like.start_timeout;
        if (name == "code-interpreter") k.preload = like.preload;  // Python, as the default's
        out.push_back(std::move(k));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
}

kernelspec_registry::kernelspec_registry(std::vector<kernelspec> specs, std::string default_name,
                                         const launcher::launcher_config& launcher_config)
    : image_store_(launcher_config.image_store), default_(std::move(default_name)) {
    for (auto& k : specs) {
        const fs::path rootfs = launcher_config.image_store / k.image / "current" / "rootfs";
        k.context_languages = context_languages_of(rootfs);
        const fs::path json_path = rootfs / "usr/local/share/jupyter/kernels" / k.name / "kernel.json";
        std::ifstream in(json_path);
        if (in) {
            const auto j = nlohmann::json::parse(in, nullptr, false);
            if (j.is_object()) {
                if (k.display_name.empty()) k.display_name = j.value("display_name", k.name);
                if (k.argv.empty() && j.contains("argv")) k.argv = j["argv"].get<std::vector<std::string>>();
                k.language = j.value("language", k.language);
                k.interrupt_mode = j.value("interrupt_mode", k.interrupt_mode);
                // The kernel's environment (the languages image's say which
                // kernel its entry point starts); a template's ENV wins.
                if (const auto m = j.find("metadata"); m != j.end() && m->is_object() && m->contains("cellgate") &&
                                                       (*m)["cellgate"].is_object())
                {
                    const auto& ours = (*m)["cellgate"];
                    k.listed = ours.value("listed", true);
                    if (const auto settle = ours.find("output_settle_ms"); settle != ours.end() && settle->is_number())
                        k.output_settle = std::chrono::milliseconds(std::clamp<std::int64_t>(settle->get<std::int64_t>(), 0, 1000));
                }
                if (const auto env = j.find("env"); env != j.end() && env->is_object())
                    for (const auto& [name, value] : env->items())
                        if (value.is_string()) k.image_env.emplace(name, value.get<std::string>());
            }
        }
        for (const char* logo : {"logo-32x32.png", "logo-64x64.png", "logo-svg.svg"}) {
            const fs::path p = rootfs / "usr/lib/python3/dist-packages/ipykernel/resources" / logo;
            std::error_code ec;
            if (fs::is_regular_file(p, ec)) k.resources[logo] = p;
        }
        if (k.display_name.empty()) k.display_name = k.name;
        specs_[k.name] = std::move(k);
    }
    if (specs_.count(default_) == 0 && !specs_.empty()) default_ = specs_.begin()->first;
}

const kernelspec* kernelspec_registry::find(const std::string& name) const {
    const auto it = specs_.find(name);
    if (it != specs_.end()) return &it->second;
    const std::shared_lock lock(templates_mutex_);
    const auto t = templates_.find(name);
    return t == templates_.end() ? nullptr : t->second.versions.back().get();
}

const kernelspec* kernelspec_registry::find_for(const std::string& name, const std::string& tenant) const {
    if (const auto it = specs_.find(name); it != specs_.end()) return &it->second;
    const std::shared_lock lock(templates_mutex_);
    const auto t = templates_.find(name);
    if (t == templates_.end() || t->second.hidden || t->second.versions.back()->owner != tenant) return nullptr;
    return t->second.versions.back().get();
}

void kernelspec_registry::add_template(kernelspec spec) {
    if (spec.context_languages.empty())  // a layered template's rootfs may not be there: Python only
        spec.context_languages = context_languages_of(image_store_ / spec.image / "current" / "rootfs");
    const std::unique_lock lock(templates_mutex_);
    auto& entry = templates_[spec.name];
    entry.versions.push_back(std::make_unique<kernelspec>(std::move(spec)));
    entry.hidden = false;
}

void kernelspec_registry::hide(const std::string& name) {
    const std::unique_lock lock(templates_mutex_);
    if (const auto t = templates_.find(name); t != templates_.end()) t->second.hidden = true;
}

nlohmann::json kernelspec_registry::model(const kernelspec& k) const {
    nlohmann::json resources = nlohmann::json::object();
    for (const auto& [file, path] : k.resources) {
        const auto dot = file.rfind('.');
        resources[file.substr(0, dot)] = "/kernelspecs/" + k.name + "/" + file;
    }
    return {{"name", k.name},
            {"spec",
             {{"argv", k.argv},
              {"display_name", k.display_name},
              {"language", k.language},
              {"interrupt_mode", k.interrupt_mode},
              {"env", nlohmann::json::object()},
              {"metadata", {{"cellgate", {{"image", k.image}, {"runtime", k.runtime}}}}}}},
            {"resources", resources}};
}

nlohmann::json kernelspec_registry::models(const std::string& tenant) const {
    nlohmann::json specs = nlohmann::json::object();
    for (const auto& [name, k] : specs_)
        if (k.listed) specs[name] = model(k);
    const std::shared_lock lock(templates_mutex_);
    for (const auto& [name, t] : templates_)
        if (!t.hidden && t.versions.back()->owner == tenant) specs[name] = model(*t.versions.back());
    return {{"default", default_}, {"kernelspecs", specs}};
}

}  // namespace cellgate::kernels
