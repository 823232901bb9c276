#include "kernels/policy.hpp"

namespace cellgate::kernels {

namespace {

std::uint64_t whole(const nlohmann::json& v, const std::string& key, const std::string& where) {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
        throw policy_error(where + "." + key + " must be a whole number of " +
                           (key.find("limit") != std::string::npos ? "bytes" : "seconds") + " (0 = none)");
    return v.get<std::uint64_t>();
}

policy_overrides overrides_from(const nlohmann::json& j, const std::string& where, bool nested) {
    policy_overrides o;
    for (const auto& [key, v] : j.items()) {
        if (nested && (key == "jupyter" || key == "agent")) continue;
        if (key == "on_idle") {
            if (!v.is_string() || (v != "delete" && v != "pause"))
                throw policy_error(where + ".on_idle must be \"delete\" or \"pause\"");
            o.pause_on_idle = v == "pause";
            continue;
        }
        if (key == "auto_resume") {
            if (!v.is_boolean()) throw policy_error(where + ".auto_resume must be true or false");
            o.auto_resume = v.get<bool>();
            continue;
        }
        const auto n = [&] { return whole(v, key, where); };
        if (key == "exec_timeout") o.exec_timeout = std::chrono::seconds(n());
        else if (key == "idle_timeout") o.idle_timeout = std::chrono::seconds(n());
        else if (key == "lifetime") o.lifetime = std::chrono::seconds(n());
        else if (key == "output_limit") o.output_limit_bytes = n();
        else if (key == "result_limit") o.result_limit_bytes = n();
        else if (key == "upload_limit") o.upload_limit_bytes = n();
        else
            throw policy_error("unknown key '" + key + "' in " + where +
                                " (exec_timeout, idle_timeout, lifetime, output_limit, result_limit, upload_limit, on_idle, auto_resume" +
                               (nested ? ", jupyter, agent)" : ")"));
    }
    return o;
}

}  // namespace

void policy_overrides::apply_to(kernel_policy& p) const {
    if (exec_timeout) p.exec_timeout = *exec_timeout;
    if (idle_timeout) p.idle_timeout = *idle_timeout;
    if (lifetime) p.lifetime = *lifetime;
    if (output_limit_bytes) p.output_limit_bytes = *output_limit_bytes;
    if (result_limit_bytes) p.result_limit_bytes = *result_limit_bytes;
    if (upload_limit_bytes) p.upload_limit_bytes = *upload_limit_bytes;
    if (pause_on_idle) p.pause_on_idle = *pause_on_idle;
    if (auto_resume) p.auto_resume = *auto_resume;
}

void policy_layer::apply_to(kernel_policy& p, surface s) const {
    both.apply_to(p);
    (s == surface::jupyter ? jupyter : agent).apply_to(p);
}

policy_layer policy_layer_from_json(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) throw policy_error(where + " must be an object");
    policy_layer layer;
    layer.both = overrides_from(j, where, true);
    for (const char* name : {"jupyter", "agent"}) {
        const auto it = j.find(name);
        if (it == j.end()) continue;
        const std::string inner = where + "." + name;
        if (!it->is_object()) throw policy_error(inner + " must be an object");
        (std::string(name) == "jupyter" ? layer.jupyter : layer.agent) = overrides_from(*it, inner, false);
    }
    return layer;
}

kernel_policy policy_book::resolve(surface s, const std::string& spec_name, const std::string& tenant) const {
    kernel_policy p = s == surface::jupyter ? jupyter : agent;
    if (const auto it = by_kernelspec.find(spec_name); it != by_kernelspec.end()) it->second.apply_to(p, s);
    if (const auto it = by_tenant.find(tenant); it != by_tenant.end()) it->second.apply_to(p, s);
    return p;
}

nlohmann::json to_json(const kernel_policy& p) {
    return {{"exec_timeout", p.exec_timeout.count()},   {"idle_timeout", p.idle_timeout.count()},
            {"lifetime", p.lifetime.count()},           {"output_limit", p.output_limit_bytes},
            {"result_limit", p.result_limit_bytes},     {"upload_limit", p.upload_limit_bytes},
            {"on_idle", p.pause_on_idle ? "pause" : "delete"}, {"auto_resume", p.auto_resume}};
}

}  // namespace cellgate::kernels
