#include "cellgate/launcher/service.hpp"

#include <csignal>
#include <map>

namespace cellgate::launcher::service {

namespace {

using json = nlohmann::json;

const std::map<std::string, op>& ops() {
    static const std::map<std::string, op> table = {
        {"create", op::create}, {"validate", op::validate}, {"signal", op::signal},
        {"status", op::status}, {"list", op::list},         {"remove", op::remove},
        {"set_cpu_shares", op::set_cpu_shares},             {"usage", op::usage},         {"reap", op::reap},
        {"exec", op::exec},         {"checkpoint", op::checkpoint}, {"restore", op::restore},
        {"snapshot", op::snapshot}, {"remove_snapshot", op::remove_snapshot},
        {"create_volume", op::create_volume}, {"volume_usage", op::volume_usage}, {"remove_volume", op::remove_volume},
        {"build_step", op::build_step}, {"remove_layer", op::remove_layer}, {"import_image", op::import_image}};
    return table;
}

// The fields each operation takes, besides "op".
const std::map<op, std::set<std::string>>& fields() {
    static const std::map<op, std::set<std::string>> table = {
        {op::create, {"spec"}},
        {op::validate, {"spec"}},
        {op::signal, {"id", "signal"}},
        {op::status, {"id"}},
        {op::list, {}},
        {op::remove, {"id", "keep_workspace"}},
        {op::set_cpu_shares, {"id", "shares"}},
        {op::usage, {"id", "reset_peak"}},
        {op::reap, {"keep", "unused_workspaces"}},
        {op::exec, {"id", "process"}},
        {op::checkpoint, {"id"}},
        {op::restore, {"id"}},
        {op::snapshot, {"id", "snapshot"}},
        {op::remove_snapshot, {"snapshot"}},
        {op::create_volume, {"volume", "bytes"}},
        {op::volume_usage, {"volume"}},
        {op::remove_volume, {"volume"}},
        {op::build_step, {"step"}},
        {op::remove_layer, {"layer"}},
        {op::import_image, {"import"}}};
    return table;
}

const std::map<std::string, int>& signals() {
    static const std::map<std::string, int> table = {{"SIGINT", SIGINT}, {"SIGTERM", SIGTERM}, {"SIGKILL", SIGKILL}};
    return table;
}

std::string op_name(op o) {
    for (const auto& [name, value] : ops())
        if (value == o) return name;
    return "?";
}

// Sandbox ids are what the launcher makes and accepts: short, plain names.
std::string read_id(const json& j, const char* field) {
    const auto it = j.find(field);
    if (it == j.end() || !it->is_string()) throw bad_request(std::string("'") + field + "' must be a string");
    const auto id = it->get<std::string>();
    if (id.empty() || id.size() > 64) throw bad_request("a sandbox id has 1 to 64 characters");
    for (const char c : id)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
            throw bad_request("a sandbox id holds only letters, digits, '-' and '_'");
    return id;
}

bool read_bool(const json& j, const char* field) {
    const auto it = j.find(field);
    if (it == j.end()) return false;
    if (!it->is_boolean()) throw bad_request(std::string("'") + field + "' must be true or false");
    return it->get<bool>();
}

}  // namespace

request parse_request(std::string_view line) {
    if (line.size() > max_request_bytes) throw bad_request("request too large");
    const auto j = json::parse(line, nullptr, false);
    if (!j.is_object()) throw bad_request("a request is one JSON object");
    const auto op_it = j.find("op");
    if (op_it == j.end() || !op_it->is_string()) throw bad_request("'op' must be a string");
    const auto found = ops().find(op_it->get<std::string>());
    if (found == ops().end()) throw bad_request("unknown op '" + op_it->get<std::string>() + "'");
    request r;
    r.op = found->second;
    const auto& allowed = fields().at(r.op);
    for (const auto& [key, value] : j.items())
        if (key != "op" && allowed.count(key) == 0)
            throw bad_request("op '" + found->first + "' takes no field '" + key + "'");

    switch (r.op) {
    case op::create:
    case op::validate: {
        const auto it = j.find("spec");
        if (it == j.end() || !it->is_object()) throw bad_request("'spec' must be an object");
        r.spec = it->get<sandbox_spec>();  // strict: spec_error on anything unknown
        // Only images from the store: a path would let the caller pick any
        // host directory as a root filesystem.
        if (!r.spec.image.empty() && r.spec.image.front() == '/')
            throw spec_error("image must be a name in the image store, not a path");
        break;
    }
    case op::signal: {
        r.id = read_id(j, "id");
        const auto it = j.find("signal");
        if (it == j.end() || !it->is_string() || signals().count(it->get<std::string>()) == 0)
            throw bad_request("'signal' must be one of SIGINT, SIGTERM, SIGKILL");
        r.signal = signals().at(it->get<std::string>());
        break;
    }
    case op::status:
    case op::checkpoint:
    case op::restore:
        r.id = read_id(j, "id");
        break;
    case op::remove:
        r.id = read_id(j, "id");
        r.keep_workspace = read_bool(j, "keep_workspace");
        break;
    case op::snapshot:
        r.id = read_id(j, "id");
        r.snapshot = read_id(j, "snapshot");
        break;
    case op::remove_snapshot: r.snapshot = read_id(j, "snapshot"); break;
    case op::create_volume: {
        r.volume = read_id(j, "volume");
        const auto it = j.find("bytes");
        if (it == j.end() || !it->is_number_unsigned()) throw bad_request("'bytes' must be a whole number");
        r.bytes = it->get<std::uint64_t>();
        break;
    }
    case op::volume_usage:
    case op::remove_volume: r.volume = read_id(j, "volume"); break;
    case op::build_step: {
        const auto it = j.find("step");
        if (it == j.end() || !it->is_object()) throw bad_request("'step' must be an object");
        r.step = it->get<build_step_spec>();  // strict: spec_error on anything unknown
        // A parent is a name in the store or a layer id, never a path.
        if (r.step.parent.find('/') != std::string::npos) throw spec_error("a build step's parent is a name, not a path");
        break;
    }
    case op::import_image: {
        const auto it = j.find("import");
        if (it == j.end() || !it->is_object()) throw bad_request("'import' must be an object");
        r.import = it->get<image_import_spec>();  // strict: spec_error on anything unknown
        break;
    }
    case op::remove_layer: {
        const auto it = j.find("layer");
        if (it == j.end() || !it->is_string() || !is_valid_layer_id(it->get<std::string>()))
            throw bad_request("'layer' must be a layer id (48 lower-case hex digits)");
        r.layer = it->get<std::string>();
        break;
    }
    case op::usage:
        r.id = read_id(j, "id");
        r.reset_peak = read_bool(j, "reset_peak");
        break;
    case op::set_cpu_shares: {
        r.id = read_id(j, "id");
        const auto it = j.find("shares");
        if (it == j.end() || !it->is_number_unsigned() || it->get<std::uint64_t>() < 2 ||
            it->get<std::uint64_t>() > 262144)
            throw bad_request("'shares' must be a whole number from 2 to 262144");
        r.shares = it->get<std::uint32_t>();
        break;
    }
    case op::reap: {
        if (const auto it = j.find("keep"); it != j.end()) {
            if (!it->is_array() || it->size() > 100000) throw bad_request("'keep' must be an array of ids");
            for (std::size_t i = 0; i < it->size(); ++i) r.keep.insert(read_id(json{{"id", (*it)[i]}}, "id"));
        }
        r.unused_workspaces = read_bool(j, "unused_workspaces");
        break;
    }
    case op::exec: {
        r.id = read_id(j, "id");
        const auto it = j.find("process");
        if (it == j.end() || !it->is_object()) throw bad_request("'process' must be an object");
        r.process = it->get<exec_spec>();  // strict: spec_error on anything unknown
        validate_exec_spec(r.process);
        break;
    }
    case op::list:
        break;
    }
    return r;
}

json to_json(const request& r) {
    json j{{"op", op_name(r.op)}};
    switch (r.op) {
    case op::create:
    case op::validate: j["spec"] = r.spec; break;
    case op::signal: {
        for (const auto& [name, value] : signals())
            if (value == r.signal) j["signal"] = name;
        j["id"] = r.id;
        break;
    }
    case op::status:
    case op::checkpoint:
    case op::restore: j["id"] = r.id; break;
    case op::remove:
        j["id"] = r.id;
        j["keep_workspace"] = r.keep_workspace;
        break;
    case op::snapshot:
        j["id"] = r.id;
        j["snapshot"] = r.snapshot;
        break;
    case op::remove_snapshot: j["snapshot"] = r.snapshot; break;
    case op::create_volume:
        j["volume"] = r.volume;
        j["bytes"] = r.bytes;
        break;
    case op::volume_usage:
    case op::remove_volume: j["volume"] = r.volume; break;
    case op::build_step: j["step"] = r.step; break;
    case op::remove_layer: j["layer"] = r.layer; break;
    case op::import_image: j["import"] = r.import; break;
    case op::usage:
        j["id"] = r.id;
        j["reset_peak"] = r.reset_peak;
        break;
    case op::set_cpu_shares:
        j["id"] = r.id;
        j["shares"] = r.shares;
        break;
    case op::reap:
        j["keep"] = r.keep;
        j["unused_workspaces"] = r.unused_workspaces;
        break;
    case op::exec:
        j["id"] = r.id;
        j["process"] = r.process;
        break;
    case op::list: break;
    }
    return j;
}

json status_to_json(const sandbox_status& s) {
    return {{"id", s.id},
            {"state", std::string(to_string(s.state))},
            {"pid", s.pid},
            {"oom_killed", s.oom_killed},
            {"memory_bytes", s.memory_bytes},
            {"pids", s.pids},
            {"info", s.info ? to_persisted_json(*s.info) : json(nullptr)}};
}

json usage_to_json(const sandbox_usage& u) {
    return {{"cpu_ns", u.cpu_ns}, {"memory_bytes", u.memory_bytes}, {"memory_peak_bytes", u.memory_peak_bytes},
            {"peak_resettable", u.peak_resettable}};
}

sandbox_usage usage_from_json(const json& j) {
    sandbox_usage u;
    u.cpu_ns = j.at("cpu_ns").get<std::uint64_t>();
    u.memory_bytes = j.at("memory_bytes").get<std::uint64_t>();
    u.memory_peak_bytes = j.at("memory_peak_bytes").get<std::uint64_t>();
    u.peak_resettable = j.at("peak_resettable").get<bool>();
    return u;
}

sandbox_status status_from_json(const json& j) {
    sandbox_status s;
    s.id = j.at("id").get<std::string>();
    const auto state = j.at("state").get<std::string>();
    for (auto candidate : {sandbox_state::creating, sandbox_state::running, sandbox_state::stopped, sandbox_state::missing})
        if (to_string(candidate) == state) s.state = candidate;
    s.pid = j.at("pid").get<std::int64_t>();
    s.oom_killed = j.at("oom_killed").get<bool>();
    s.memory_bytes = j.at("memory_bytes").get<std::uint64_t>();
    s.pids = j.at("pids").get<std::uint32_t>();
    if (const auto& info = j.at("info"); !info.is_null()) s.info = sandbox_info_from_json(info);
    return s;
}

}  // namespace cellgate::launcher::service
