#include "kit/request_models.hpp"

#include "agent/agent_service.hpp"
#include "core/cell_request.hpp"
#include "core/session_request.hpp"
#include "contents/contents_store.hpp"
#include "kernels/kernel.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace cellgate::kit {

using nlohmann::json;

namespace {

// A workspace path from a request; a malformed one is a 400.
std::string checked_path(std::string_view path) {
    try {
        return contents::contents_store::check_path(path);
    } catch (const contents::contents_error& e) {
        throw api_exception(400, e.what());
    }
}

}  // namespace

std::string string_field(const json& body, const char* key, const std::string& fallback) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_string()) throw api_exception(400, std::string("'") + key + "' must be a string");
    return it->get<std::string>();
}

std::map<std::string, std::string> string_object(const json& body, const char* key, const std::string& where) {
    std::map<std::string, std::string> out;
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return out;
    if (!it->is_object()) throw api_exception(400, "'" + where + "' must be an object of strings");
    for (const auto& [name, value] : it->items()) {
        if (!value.is_string()) throw api_exception(400, "'" + where + "." + name.substr(0, 64) + "' must be a string");
        out[name] = value.get<std::string>();
    }
    return out;
}

std::map<std::string, std::string> kernel_env_from(const json& body) {
    std::map<std::string, std::string> env;
    const auto it = body.find("env");
    if (it == body.end() || it->is_null()) return env;
    if (!it->is_object()) throw api_exception(400, "'env' must be an object of strings");
    for (const auto& [name, value] : it->items()) {
        // Only KERNEL_* variables reach a sandbox (as Enterprise Gateway does);
        // anything else a client sends is ignored.
        if (name.rfind("KERNEL_", 0) != 0) continue;
        if (!value.is_string()) throw api_exception(400, "env value of '" + name.substr(0, 64) + "' must be a string");
        env[name] = value.get<std::string>();
    }
    return env;
}

std::map<std::string, std::string> strict_env(const json& body) {
    if (const auto it = body.find("env"); it != body.end() && it->is_object())
        for (const auto& [name, value] : it->items())
            if (name.rfind("KERNEL_", 0) != 0)
                throw api_exception(400, "env takes KERNEL_* names only; '" + name.substr(0, 64) + "' is not one");
    return kernel_env_from(body);
}

std::string kernel_name_from(const json& body) {
    if (const auto it = body.find("name"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) throw api_exception(400, "'name' must be a string");
        return it->get<std::string>();
    }
    return {};
}

std::string session_field(const json& body, const char* key, const std::string& fallback) {
    auto v = string_field(body, key, fallback);
    // Records are kept in memory and in the state database (review L2); a
    // path or name longer than this is no real notebook's.
    if (v.size() > max_session_field_bytes)
        throw api_exception(400, std::string("'") + key + "' is longer than " +
                                     std::to_string(max_session_field_bytes) + " bytes");
    return v;
}

session_fields session_fields_from(const json& body) {
    session_fields f;
    f.path = session_field(body, "path");
    f.name = session_field(body, "name");
    f.type = session_field(body, "type", "notebook");
    if (f.path.empty()) f.path = session_field(body, "notebook");
    if (f.path.empty()) throw api_exception(400, "A session needs a 'path'");
    return f;
}

json kernel_member(const json& body) {
    if (const auto it = body.find("kernel"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) throw api_exception(400, "'kernel' must be an object with 'id' or 'name'");
        return *it;
    }
    return json::object();
}

contents_payload contents_payload_from(const json& body, const std::string& type) {
    contents_payload p;
    const auto content = body.find("content");
    if (content == body.end() || content->is_null()) return p;
    if (type == "notebook") {
        if (!content->is_object()) throw api_exception(400, "A notebook's content must be a JSON object");
        p.data = content->dump(1);
    } else {
        if (!content->is_string()) throw api_exception(400, "'content' must be a string");
        const auto format = body.value("format", std::string("text"));
        if (format == "base64") {
            auto decoded = base64_decode(content->get_ref<const std::string&>());
            if (!decoded) throw api_exception(400, "'content' is not valid base64");
            p.data = std::move(*decoded);
        } else if (format == "text") {
            p.data = content->get<std::string>();
        } else {
            throw api_exception(400, "Unknown format '" + format.substr(0, 32) + "'");
        }
    }
    // Chunked upload as JupyterLab sends it.
    const auto chunk = body.find("chunk");
    if (chunk != body.end() && !chunk->is_null()) {
        if (!chunk->is_number_integer()) throw api_exception(400, "'chunk' must be an integer");
        const auto n = chunk->get<long long>();
        if (n < 1 && n != -1) throw api_exception(400, "'chunk' must be 1, 2, … or -1");
        p.chunk = n;
    }
    return p;
}

new_entry_request new_entry_from(const json& body) {
    new_entry_request r;
    if (const auto from = body.find("copy_from"); from != body.end() && from->is_string()) {
        r.copy_from = from->get<std::string>();
        return r;
    }
    r.type = body.value("type", std::string("file"));
    r.ext = body.value("ext", std::string());
    if (r.type == "notebook") r.ext = ".ipynb";
    if (!r.ext.empty() && r.ext.front() != '.') r.ext.insert(0, ".");
    return r;
}

std::string rename_target_from(const json& body) {
    const auto to = body.find("path");
    if (to == body.end() || !to->is_string()) throw api_exception(400, "PATCH needs the new 'path'");
    return to->get<std::string>();
}

std::string snapshot_name(const json& body) {
    const auto it = body.find("name");
    if (it == body.end() || it->is_null()) return {};
    if (!it->is_string()) throw api_exception(400, "'name' must be a string");
    auto name = it->get<std::string>();
    if (name.empty() || name.size() > 128) throw api_exception(400, "'name' must have 1 to 128 characters");
    for (const char ch : name)
        if (const auto c = static_cast<unsigned char>(ch); c < 0x20 || c == 0x7f)
            throw api_exception(400, "'name' must not hold control characters");
    return name;
}

std::size_t fork_count(const json& body) {
    const auto it = body.find("count");
    if (it == body.end() || it->is_null()) return 1;
    if (!it->is_number_integer() || it->get<long long>() < 1 ||
        it->get<long long>() > static_cast<long long>(max_fork_children))
        throw api_exception(400, "'count' must be a whole number from 1 to " + std::to_string(max_fork_children));
    return it->get<std::size_t>();
}

std::string snapshot_request_from(const json& body) {
    if (!body.is_object()) throw api_exception(400, "The body must be a JSON object");
    only_members(body, {"name"}, "a snapshot request (name)");
    return snapshot_name(body);
}

fork_request fork_request_from(const json& body) {
    if (!body.is_object()) throw api_exception(400, "The body must be a JSON object");
    only_members(body, {"count", "name"}, "a fork request (count, name)");
    return {fork_count(body), snapshot_name(body)};
}

void only_members(const json& body, std::initializer_list<const char*> allowed, const char* what) {
    for (const auto& [key, v] : body.items()) {
        bool ok = false;
        for (const char* a : allowed) ok = ok || key == a;
        if (!ok) throw api_exception(400, "Unknown member '" + key.substr(0, 64) + "' in " + what);
    }
}

std::string agent_kernel_name(const json& body) {
    const auto it = body.find("kernel");
    if (it == body.end() || it->is_null()) return {};
    if (!it->is_string()) throw api_exception(400, "'kernel' must be a string");
    return it->get<std::string>();
}

namespace {

// A positive time or size a new session asks for (fractions round up), or
// nothing when absent; the core holds it to its ceiling (core::policy_for).
template <class T>
std::optional<T> asked(const json& body, const char* key) {
    constexpr double most = 1e15;  // far past any ceiling, and within every type here
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number() || it->get<double>() <= 0) throw api_exception(400, std::string("'") + key + "' must be a positive number");
    const double v = std::min(std::ceil(it->get<double>()), most);
    return static_cast<T>(std::max(v, 1.0));
}

}  // namespace

std::optional<std::chrono::seconds> asked_seconds(const json& body, const char* key) {
    if (const auto v = asked<long long>(body, key)) return std::chrono::seconds(*v);
    return std::nullopt;
}

namespace {

// {"lifecycle": {"on_idle": "pause" | "delete", "auto_resume": bool}}
void lifecycle_into(const json& body, kernels::policy_overrides& o) {
    const auto it = body.find("lifecycle");
    if (it == body.end() || it->is_null()) return;
    if (!it->is_object()) throw api_exception(400, "'lifecycle' must be an object");
    for (const auto& [key, v] : it->items()) {
        if (key == "on_idle") {
            if (!v.is_string() || (v != "pause" && v != "delete"))
                throw api_exception(400, "'lifecycle.on_idle' must be \"pause\" or \"delete\"");
            o.pause_on_idle = v == "pause";
        } else if (key == "auto_resume") {
            if (!v.is_boolean()) throw api_exception(400, "'lifecycle.auto_resume' must be true or false");
            o.auto_resume = v.get<bool>();
        } else {
            throw api_exception(400, "Unknown member '" + key.substr(0, 64) + "' in 'lifecycle' (on_idle, auto_resume)");
        }
    }
}

std::vector<core::volume_request> volume_requests_from(const json& body) {
    std::vector<core::volume_request> out;
    const auto it = body.find("volumes");
    if (it == body.end() || it->is_null()) return out;
    if (!it->is_array() || it->size() > 8) throw api_exception(400, "'volumes' must be an array of at most 8 {name, path?, read_only?}");
    for (const auto& m : *it) {
        if (!m.is_object()) throw api_exception(400, "each of 'volumes' is an object {name, path?, read_only?}");
        only_members(m, {"name", "path", "read_only"}, "a volume (name, path, read_only)");
        if (!m.contains("name") || !m["name"].is_string()) throw api_exception(400, "a volume needs its 'name'");
        core::volume_request v;
        v.name = m["name"].get<std::string>();
        if (m.contains("path") && !m["path"].is_null()) {
            if (!m["path"].is_string()) throw api_exception(400, "a volume's 'path' must be a string");
            v.path = m["path"].get<std::string>();
            if (!v.path.starts_with("/volumes/") || !is_volume_name(v.path.substr(9)))
                throw api_exception(400, "a volume's 'path' is /volumes/<name> (letters, digits, '-', '_'): '" +
                                             v.path.substr(0, 100) + "'");
        }
        if (m.contains("read_only") && !m["read_only"].is_null()) {
            if (!m["read_only"].is_boolean()) throw api_exception(400, "a volume's 'read_only' must be true or false");
            v.read_only = m["read_only"].get<bool>();
        }
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace

bool is_volume_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    for (const char c : n)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return false;
    return true;
}

kernels::policy_overrides limits_asked_from(const json& body) {
    kernels::policy_overrides o;
    o.exec_timeout = asked_seconds(body, "timeout_s");
    o.idle_timeout = asked_seconds(body, "idle_timeout_s");
    o.lifetime = asked_seconds(body, "lifetime_s");
    o.output_limit_bytes = asked<std::size_t>(body, "output_limit_bytes");
    lifecycle_into(body, o);
    return o;
}

core::session_request session_request_from(const json& body, const std::string& tenant) {
    core::session_request r;
    r.tenant = tenant;
    if (const auto from = body.find("from_snapshot"); from != body.end() && !from->is_null()) {
        if (!from->is_string()) throw api_exception(400, "'from_snapshot' must be a snapshot id (a string)");
        for (const char* other : {"kernel", "template", "env", "network", "volumes"})
            if (body.contains(other) && !body[other].is_null())
                throw api_exception(400, std::string("'") + other +
                                             "' cannot be given with 'from_snapshot': a session started from a "
                                             "snapshot runs what its source ran");
        r.from_snapshot = from->get<std::string>();
        if (r.from_snapshot.empty()) throw api_exception(400, "'from_snapshot' must be a snapshot id (a string)");
    }
    r.kernelspec = agent_kernel_name(body);
    if (const auto t = body.find("template"); t != body.end() && !t->is_null()) {
        if (!t->is_string() || t->get<std::string>().empty())
            throw api_exception(400, "'template' must be a template's name[:tag] (a string)");
        if (!r.kernelspec.empty()) throw api_exception(400, "'kernel' and 'template' name the same thing: give one");
        r.template_ref = t->get<std::string>();
    }
    r.env = strict_env(body);
    r.limits = limits_asked_from(body);
    if (const auto n = body.find("network"); n != body.end() && !n->is_null()) r.network = *n;
    r.volumes = volume_requests_from(body);
    return r;
}

core::cell_request cell_request_from(const json& body) {
    core::cell_request r;
    const auto code = body.find("code");
    if (code == body.end() || !code->is_string()) throw api_exception(400, "'code' (a string) is required");
    r.code = code->get<std::string>();
    r.timeout = asked_seconds(body, "timeout_s");
    r.max_output_tokens = asked<std::size_t>(body, "max_output_tokens");
    r.max_output_bytes = asked<std::size_t>(body, "max_output_bytes");
    r.max_image_pixels = asked<std::uint64_t>(body, "max_image_pixels");
    return r;
}

std::vector<std::pair<std::string, std::string>> inline_files_from(const json& body) {
    std::vector<std::pair<std::string, std::string>> files;
    const auto it = body.find("files");
    if (it == body.end() || it->is_null()) return files;
    if (!it->is_array()) throw api_exception(400, "'files' must be an array of {path, content_base64}");
    for (const auto& f : *it) {
        if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("content_base64") ||
            !f["content_base64"].is_string())
            throw api_exception(400, "each file needs 'path' and 'content_base64' strings");
        auto data = base64_decode(f["content_base64"].get<std::string>());
        if (!data) throw api_exception(400, "'content_base64' of " + f["path"].get<std::string>().substr(0, 100) + " is not base64");
        files.emplace_back(checked_path(f["path"].get<std::string>()), std::move(*data));
    }
    return files;
}

std::string form_directory(const std::vector<form_part>& parts) {
    std::string dir;
    for (const auto& p : parts)
        if (!p.filename && p.name == "path") dir = std::string(p.data);
    return dir;
}

std::string form_file_path(const form_part& part, const std::string& directory) {
    const std::string base = std::filesystem::path(part.filename.value_or("")).filename().string();
    if (base.empty() || base == "." || base == "..") throw api_exception(400, "A file part has no usable filename");
    return checked_path(directory.empty() ? base : directory + "/" + base);
}

}  // namespace cellgate::kit
