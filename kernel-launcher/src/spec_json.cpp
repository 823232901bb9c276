// JSON forms of the launcher's plain structs. Parsing is strict: unknown
// fields, wrong types and negative numbers are refused with a spec_error that
// names the field, because these structs are the launcher's request schema.
#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/sandbox_info.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <initializer_list>
#include <limits>
#include <string_view>

namespace cellgate::launcher {
namespace {

using nlohmann::json;

void require_object(const json& j, std::string_view what,
                    std::initializer_list<std::string_view> known) {
    if (!j.is_object()) throw spec_error(std::string(what) + " must be a JSON object");
    for (const auto& [key, value] : j.items()) {
        bool ok = false;
        for (auto k : known) ok = ok || key == k;
        if (!ok) throw spec_error("unknown field '" + key + "' in " + std::string(what));
    }
}

template <typename T>
void read_unsigned(const json& j, const char* key, T& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_number_unsigned())
        throw spec_error(std::string("'") + key + "' must be a non-negative integer");
    const auto v = it->get<std::uint64_t>();
    if (v > std::numeric_limits<T>::max())
        throw spec_error(std::string("'") + key + "' is too large");
    out = static_cast<T>(v);
}

void read_string(const json& j, const char* key, std::string& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_string()) throw spec_error(std::string("'") + key + "' must be a string");
    out = it->get<std::string>();
}

}  // namespace

void to_json(json& j, const sandbox_limits& l) {
    j = json{{"memory_bytes", l.memory_bytes}, {"pids", l.pids},
             {"cpu_millis", l.cpu_millis},     {"workspace_bytes", l.workspace_bytes},
             {"tmp_bytes", l.tmp_bytes},       {"nofile", l.nofile},
             {"fsize_bytes", l.fsize_bytes},    {"cpu_shares", l.cpu_shares}};
}

void from_json(const json& j, sandbox_limits& l) {
    require_object(j, "limits",
                   {"memory_bytes", "pids", "cpu_millis", "workspace_bytes", "tmp_bytes", "nofile",
                    "fsize_bytes", "cpu_shares"});
    read_unsigned(j, "memory_bytes", l.memory_bytes);
    read_unsigned(j, "pids", l.pids);
    read_unsigned(j, "cpu_millis", l.cpu_millis);
    read_unsigned(j, "workspace_bytes", l.workspace_bytes);
    read_unsigned(j, "tmp_bytes", l.tmp_bytes);
    read_unsigned(j, "nofile", l.nofile);
    read_unsigned(j, "fsize_bytes", l.fsize_bytes);
    read_unsigned(j, "cpu_shares", l.cpu_shares);
}

void to_json(json& j, const volume_mount& v) {
    j = json{{"volume", v.volume}, {"path", v.path}, {"read_only", v.read_only}};
}

void from_json(const json& j, volume_mount& v) {
    require_object(j, "volume mount", {"volume", "path", "read_only"});
    read_string(j, "volume", v.volume);
    read_string(j, "path", v.path);
    if (const auto it = j.find("read_only"); it != j.end()) {
        if (!it->is_boolean()) throw spec_error("a volume mount's read_only must be true or false");
        v.read_only = it->get<bool>();
    }
}

void to_json(json& j, const sandbox_spec& s) {
    j = json{{"id", s.id},
             {"image", s.image},
             {"runtime", s.runtime},
             {"limits", s.limits},
             {"workspace_dir", s.workspace_dir},
             {"env", s.env},
             {"uid", s.uid},
             {"gid", s.gid},
             {"preload", s.preload},
             {"egress_dir", s.egress_dir},
             {"from_snapshot", s.from_snapshot},
             {"volumes", s.volumes},
             {"start_timeout_ms", static_cast<std::uint64_t>(s.start_timeout.count())}};
    if (!s.image_env.empty()) j["image_env"] = s.image_env;
    if (!s.start_cmd.empty()) j["start_cmd"] = s.start_cmd;
    if (!s.ready_cmd.empty()) j["ready_cmd"] = s.ready_cmd;
    if (!s.start_dir.empty()) j["start_dir"] = s.start_dir;
}

void from_json(const json& j, sandbox_spec& s) {
    require_object(j, "sandbox spec",
                   {"id", "image", "runtime", "limits", "workspace_dir", "env", "uid", "gid",
                    "preload", "start_timeout_ms", "egress_dir", "from_snapshot", "volumes", "image_env",
                    "start_cmd", "ready_cmd", "start_dir"});
    read_string(j, "id", s.id);
    read_string(j, "image", s.image);
    read_string(j, "runtime", s.runtime);
    if (const auto it = j.find("limits"); it != j.end()) from_json(*it, s.limits);
    read_string(j, "workspace_dir", s.workspace_dir);
    read_string(j, "egress_dir", s.egress_dir);
    read_string(j, "from_snapshot", s.from_snapshot);
    read_string(j, "start_cmd", s.start_cmd);
    read_string(j, "ready_cmd", s.ready_cmd);
    read_string(j, "start_dir", s.start_dir);
    if (const auto it = j.find("volumes"); it != j.end()) {
        if (!it->is_array() || it->size() > 8) throw spec_error("'volumes' must be an array of at most 8 mounts");
        s.volumes.clear();
        for (const auto& v : *it) s.volumes.push_back(v.get<volume_mount>());
    }
    if (const auto it = j.find("env"); it != j.end()) {
        if (!it->is_object()) throw spec_error("'env' must be an object of strings");
        s.env.clear();
        for (const auto& [k, v] : it->items()) {
            if (!v.is_string()) throw spec_error("env value of '" + k + "' must be a string");
            s.env[k] = v.get<std::string>();
        }
    }
    if (const auto it = j.find("image_env"); it != j.end()) {
        if (!it->is_object()) throw spec_error("'image_env' must be an object of strings");
        s.image_env.clear();
        for (const auto& [k, v] : it->items()) {
            if (!v.is_string()) throw spec_error("image_env value of '" + k.substr(0, 64) + "' must be a string");
            s.image_env[k] = v.get<std::string>();
        }
    }
    read_unsigned(j, "uid", s.uid);
    read_unsigned(j, "gid", s.gid);
    if (const auto it = j.find("preload"); it != j.end()) {
        if (!it->is_array()) throw spec_error("'preload' must be an array of module names");
        s.preload.clear();
        for (const auto& m : *it) {
            if (!m.is_string()) throw spec_error("'preload' must be an array of module names");
            s.preload.push_back(m.get<std::string>());
        }
    }
    std::uint64_t timeout_ms = static_cast<std::uint64_t>(s.start_timeout.count());
    read_unsigned(j, "start_timeout_ms", timeout_ms);
    s.start_timeout = std::chrono::milliseconds(timeout_ms);
}

std::string_view to_string(sandbox_state s) noexcept {
    switch (s) {
    case sandbox_state::creating: return "creating";
    case sandbox_state::running: return "running";
    case sandbox_state::stopped: return "stopped";
    case sandbox_state::missing: return "missing";
    }
    return "missing";
}

void to_json(json& j, const kernel_endpoints& e) {
    j = json{{"shell", e.shell},     {"iopub", e.iopub}, {"stdin", e.stdin_},
             {"control", e.control}, {"hb", e.hb},       {"signature_scheme", e.signature_scheme},
             {"connection_file", e.connection_file}};
}

void to_json(json& j, const sandbox_info& i) {
    j = json{{"id", i.id},
             {"image", i.image},
             {"runtime", i.runtime},
             {"platform", i.platform},
             {"platform_reason", i.platform_reason},
             {"memory_merge", i.memory_merge},
             {"zygote", i.zygote},
             {"kernel_pid", i.kernel_pid},
             {"run_dir", i.run_dir},
             {"workspace_dir", i.workspace_dir},
             {"pid", i.pid},
             {"host_uid_base", i.host_uid_base},
             {"created_unix_ms", i.created_unix_ms},
             {"spec", i.spec},
             {"endpoints", i.endpoints},
             {"step_ms", i.step_ms}};
}

void to_json(json& j, const sandbox_status& s) {
    j = json{{"id", s.id},
             {"state", to_string(s.state)},
             {"pid", s.pid},
             {"oom_killed", s.oom_killed},
             {"memory_bytes", s.memory_bytes},
             {"pids", s.pids}};
    if (s.info) {
        j["image"] = s.info->image;
        j["workspace_dir"] = s.info->workspace_dir;
        j["created_unix_ms"] = s.info->created_unix_ms;
    }
}

json to_persisted_json(const sandbox_info& i) {
    json j = i;
    j["endpoints"]["key"] = i.endpoints.key;
    return j;
}

sandbox_info sandbox_info_from_json(const json& j) {
    sandbox_info i;
    i.id = j.at("id").get<std::string>();
    i.image = j.at("image").get<std::string>();
    i.runtime = j.at("runtime").get<std::string>();
    i.platform = j.value("platform", std::string());
    i.platform_reason = j.value("platform_reason", std::string());
    i.memory_merge = j.value("memory_merge", false);
    i.zygote = j.value("zygote", false);
    i.kernel_pid = j.value("kernel_pid", std::int64_t{0});
    i.run_dir = j.at("run_dir").get<std::string>();
    i.workspace_dir = j.at("workspace_dir").get<std::string>();
    i.pid = j.at("pid").get<std::int64_t>();
    i.host_uid_base = j.at("host_uid_base").get<std::uint32_t>();
    i.created_unix_ms = j.at("created_unix_ms").get<std::int64_t>();
    from_json(j.at("spec"), i.spec);
    const auto& e = j.at("endpoints");
    i.endpoints.shell = e.at("shell").get<std::string>();
    i.endpoints.iopub = e.at("iopub").get<std::string>();
    i.endpoints.stdin_ = e.at("stdin").get<std::string>();
    i.endpoints.control = e.at("control").get<std::string>();
    i.endpoints.hb = e.at("hb").get<std::string>();
    i.endpoints.signature_scheme = e.at("signature_scheme").get<std::string>();
    i.endpoints.connection_file = e.at("connection_file").get<std::string>();
    i.endpoints.key = e.value("key", std::string());
    if (const auto it = j.find("step_ms"); it != j.end())
        i.step_ms = it->get<std::map<std::string, double>>();
    return i;
}

}  // namespace cellgate::launcher
