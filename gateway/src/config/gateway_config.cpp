#include "config/gateway_config.hpp"

#include "cluster/etcd_client.hpp"
#include "kernels/node_id.hpp"

#include "cellgate/launcher/node_settings.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace cellgate::config {

namespace {

using nlohmann::json;

std::uint64_t to_u64(const std::string& key, const std::string& v) {
    if (v.empty() || v[0] == '-') throw config_error(key + " needs a non-negative number, not '" + v + "'");
    try {
        std::size_t used = 0;
        const auto n = std::stoull(v, &used);
        if (used != v.size()) throw config_error(key + " needs a number, not '" + v + "'");
        return n;
    } catch (const std::logic_error&) {
        throw config_error(key + " needs a number, not '" + v + "'");
    }
}

double to_double(const std::string& key, const std::string& v) {
    try {
        std::size_t used = 0;
        const double d = std::stod(v, &used);
        if (used != v.size() || d < 0) throw config_error(key + " needs a non-negative number");
        return d;
    } catch (const std::logic_error&) {
        throw config_error(key + " needs a number, not '" + v + "'");
    }
}

// A tenant's limits (kernels/policy.hpp), from its token entry. Given once per
// tenant: two entries for one tenant with different limits would be ambiguous.
void tenant_policy(gateway_config& c, const std::string& tenant, const json& entry, const std::string& where) {
    const auto it = entry.find("policy");
    if (it == entry.end()) return;
    if (c.manager.policies.by_tenant.count(tenant) != 0)
        throw config_error("tenant '" + tenant + "' has a policy on more than one token entry in " + where +
                           "; give it on one");
    try {
        c.manager.policies.by_tenant[tenant] = kernels::policy_layer_from_json(*it, "tokens[" + tenant + "].policy");
    } catch (const kernels::policy_error& e) {
        throw config_error(std::string(e.what()) + " (in " + where + ")");
    }
}

bool operator_flag(const json& entry, const std::string& where) {
    const auto it = entry.find("operator");
    if (it == entry.end()) return false;
    if (!it->is_boolean()) throw config_error("tokens[].operator must be true or false (in " + where + ")");
    return it->get<bool>();
}

egress::policy network_layer(const json& j, const std::string& where) {
    if (!j.is_object()) throw config_error(where + " must be an object {allow, deny}");
    try {
        return egress::policy::parse(j.value("allow", std::vector<std::string>{}), j.value("deny", std::vector<std::string>{}));
    } catch (const std::exception& e) {
        throw config_error(where + ": " + e.what());
    }
}

// [{"domain": "api.example.com", "header": "X-Api-Key", "value": "…"} |
//  {"domain": …, "bearer": "…"}, with "value_env"/"bearer_env" naming an
// environment variable of the gateway instead of the value itself].
std::vector<egress::injected_header> injected_headers(const json& j, const std::string& where) {
    if (!j.is_array()) throw config_error(where + " must be an array");
    std::vector<egress::injected_header> out;
    for (const auto& e : j) {
        if (!e.is_object() || !e.contains("domain") || !e["domain"].is_string())
            throw config_error(where + ": each entry needs a \"domain\"");
        egress::injected_header h;
        try {
            h.domain = egress::parse_rule(e["domain"].get<std::string>());
        } catch (const std::exception& ex) {
            throw config_error(where + ": " + ex.what());
        }
        if (h.domain.what == egress::rule::kind::network) throw config_error(where + ": a secret's domain must be a host name");
        auto from = [&](const char* key, const char* env_key) -> std::optional<std::string> {
            if (const auto v = e.find(key); v != e.end() && v->is_string()) return v->get<std::string>();
            if (const auto v = e.find(env_key); v != e.end() && v->is_string()) {
                const char* value = std::getenv(v->get<std::string>().c_str());
                if (!value) throw config_error(where + ": the environment has no " + v->get<std::string>());
                return std::string(value);
            }
            return std::nullopt;
        };
        if (auto bearer = from("bearer", "bearer_env")) {
            h.header = "Authorization";
            h.value = "Bearer " + *bearer;
        } else if (auto value = from("value", "value_env")) {
            h.header = e.value("header", "");
            h.value = *value;
        }
        if (h.header.empty() || h.value.empty() ||
            h.header.find_first_of(":\r\n ") != std::string::npos || h.value.find_first_of("\r\n") != std::string::npos)
            throw config_error(where + ": each entry needs a \"header\" and a \"value\" (or a \"bearer\"), without line breaks");
        out.push_back(std::move(h));
    }
    return out;
}

// A tokens entry's "network" (the tenant's maximum) and "secrets".
void tenant_network(gateway_config& c, const std::string& tenant, const json& entry, const std::string& where) {
    if (const auto n = entry.find("network"); n != entry.end())
        c.network.tenant_max[tenant] = network_layer(*n, where + ": tokens[" + tenant + "].network");
    if (const auto s = entry.find("secrets"); s != entry.end()) {
        auto h = injected_headers(*s, where + ": tokens[" + tenant + "].secrets");
        auto& into = c.network.tenant_headers[tenant];
        into.insert(into.end(), h.begin(), h.end());
    }
}

// A tokens file: [{"token": …, "tenant": …, "name"?: …, "max_sessions"?: n, "policy"?: {…}}, …].
void load_tokens_file(gateway_config& c, const std::string& path) {
    std::ifstream in(path);
    if (!in) throw config_error("cannot read the tokens file " + path);
    const auto j = json::parse(in, nullptr, false);
    if (!j.is_array()) throw config_error("the tokens file " + path + " must hold a JSON array");
    for (const auto& t : j) {
        if (!t.is_object() || !t.contains("token") || !t["token"].is_string() || t["token"].get<std::string>().size() < 8 ||
            !t.contains("tenant") || !t["tenant"].is_string() || t["tenant"].get<std::string>().empty())
            throw config_error("each entry of " + path + " needs a \"token\" (8+ characters) and a \"tenant\"");
        http::token_entry e;
        e.token = t["token"].get<std::string>();
        e.tenant = t["tenant"].get<std::string>();
        e.name = t.value("name", e.tenant);
        e.max_sessions = t.value("max_sessions", std::size_t{0});
        e.is_operator = operator_flag(t, path);
        tenant_policy(c, e.tenant, t, path);
        tenant_network(c, e.tenant, t, path);
        c.tokens.push_back(std::move(e));
    }
}

void node_option(gateway_config& c, const std::string& name, const std::string& v) {
    try {
        launcher::apply_node_option(c.launcher, name, v);
    } catch (const std::exception& e) {
        throw config_error(e.what());
    }
}

// One setter per option; the same names serve the command line (--ip) and
// the config file ({"ip": …}).
using setter = std::function<void(gateway_config&, const std::string&)>;

const std::map<std::string, setter>& setters() {
    static const std::map<std::string, setter> table = {
        {"ip", [](auto& c, const auto& v) { c.server.ip = v; }},
        {"port", [](auto& c, const auto& v) {
             const auto p = to_u64("port", v);
             if (p > 65535) throw config_error("port must be 0…65535");
             c.server.port = static_cast<unsigned short>(p);
         }},
        {"port_file", [](auto& c, const auto& v) { c.port_file = v; }},
        {"token", [](auto& c, const auto& v) {
             if (v.empty()) throw config_error("token must not be empty");
             c.tokens.push_back({v, "default", "default", 0, true});
         }},
        {"certfile", [](auto& c, const auto& v) { c.certfile = v; }},
        {"keyfile", [](auto& c, const auto& v) { c.keyfile = v; }},
        {"allow_origin", [](auto& c, const auto& v) { c.server.allow_origins.push_back(v); }},
        {"egress", [](auto& c, const auto& v) { c.egress = v == "true" || v == "1" || v == "yes"; }},
        {"egress_root", [](auto& c, const auto& v) { c.launcher.egress_root = v; }},
        {"egress_resolve", [](auto& c, const auto& v) {
             try {
                 c.egress_proxy.resolve.insert_or_assign(egress::parse_resolve_entry(v).first, egress::parse_resolve_entry(v).second);
             } catch (const std::invalid_argument& e) {
                 throw config_error(e.what());
             }
         }},
        {"egress_allow_internal", [](auto& c, const auto& v) {
             try {
                 const auto r = egress::parse_rule(v);
                 if (r.what != egress::rule::kind::network) throw std::invalid_argument("not a network");
                 c.egress_proxy.internal_allowed.push_back(r.net);
             } catch (const std::invalid_argument&) {
                 throw config_error("--egress-allow-internal wants a CIDR such as 10.1.2.0/24, not '" + v + "'");
             }
         }},
        // TLS the proxy terminates: "credentials" (for the hosts it adds a
        // credential to; the default), "all" (every CONNECT: the Host inside is
        // checked too), "off" (every tunnel end to end; no credentials over HTTPS).
        {"egress_tls_intercept", [](auto& c, const auto& v) {
             if (v != "credentials" && v != "all" && v != "off")
                 throw config_error("--egress-tls-intercept is credentials, all or off, not '" + v + "'");
             c.egress_tls_intercept = v;
         }},
        // Roots the proxy trusts upstream beside the system's (a private mirror's CA).
        {"egress_upstream_ca", [](auto& c, const auto& v) { c.egress_proxy.upstream_ca_files.push_back(v); }},
        // The index pip uses in sandboxes with a network (the python-packages preset's mirror).
        {"egress_pip_index_url", [](auto& c, const auto& v) {
             if ((v.rfind("https://", 0) != 0 && v.rfind("http://", 0) != 0) ||
                 v.find_first_of(" \t\r\n") != std::string::npos)
                 throw config_error("--egress-pip-index-url wants an http(s):// URL, not '" + v + "'");
             c.network.pip_index_url = v;
         }},
        // name=entry,entry: a preset a session's network may name.
        {"egress_preset", [](auto& c, const auto& v) {
             const auto eq = v.find('=');
             if (eq == std::string::npos || eq == 0) throw config_error("--egress-preset wants name=entry,entry");
             std::vector<std::string> list;
             std::stringstream in(v.substr(eq + 1));
             for (std::string e; std::getline(in, e, ',');)
                 if (!e.empty()) list.push_back(e);
             c.network.presets[v.substr(0, eq)] = list;
         }},
        {"state_dir", [](auto& c, const auto& v) { c.launcher.state_dir = v; }},
        {"image_store", [](auto& c, const auto& v) { c.launcher.image_store = v; }},
        {"workspace_root", [](auto& c, const auto& v) { c.launcher.workspace_root = v; }},
        {"runc", [](auto& c, const auto& v) { c.launcher.runc_path = v; }},
        // Per node: the in-process launcher's; with --launcher-socket, cellgate-launchd's own apply.
        {"cgroup_parent", [](auto& c, const auto& v) { node_option(c, "--cgroup-parent", v); }},
        {"uid_range_start", [](auto& c, const auto& v) { node_option(c, "--uid-range-start", v); }},
        {"uid_range_slots", [](auto& c, const auto& v) { node_option(c, "--uid-range-slots", v); }},
        // gVisor's platform: auto (kvm where /dev/kvm works, else ptrace), kvm, ptrace.
        {"runsc_platform", [](auto& c, const auto& v) { node_option(c, "--runsc-platform", v); }},
        // Kernels opt into KSM with a fixed layout (runc; docs/memory.md): on, off.
        {"memory_merge", [](auto& c, const auto& v) { node_option(c, "--memory-merge", v); }},
        // New kernels are forked from the image's pre-imported zygote (runc; docs/memory.md): on, off.
        {"zygote", [](auto& c, const auto& v) { node_option(c, "--zygote", v); }},
        {"max_kernels", [](auto& c, const auto& v) { c.manager.max_kernels = to_u64("max_kernels", v); }},
        {"auto_restart", [](auto& c, const auto& v) { c.manager.auto_restart = v == "true" || v == "1" || v == "yes"; }},
        {"iopub_msg_rate", [](auto& c, const auto& v) { c.manager.kernel.iopub_msg_rate = to_double("iopub_msg_rate", v); }},
        {"iopub_data_rate", [](auto& c, const auto& v) { c.manager.kernel.iopub_data_rate = to_double("iopub_data_rate", v); }},
        {"rate_limit_rich_outputs", [](auto& c, const auto& v) { c.manager.kernel.limit_rich_outputs = v == "true" || v == "1"; }},
        {"max_ws_message_bytes", [](auto& c, const auto& v) { c.server.max_ws_message_bytes = to_u64("max_ws_message_bytes", v); }},
        {"max_ws_queue_bytes", [](auto& c, const auto& v) { c.server.max_ws_queue_bytes = to_u64("max_ws_queue_bytes", v); }},
        {"max_body_bytes", [](auto& c, const auto& v) { c.server.max_body_bytes = to_u64("max_body_bytes", v); }},
        {"max_sse_queue_bytes", [](auto& c, const auto& v) { c.server.max_sse_queue_bytes = to_u64("max_sse_queue_bytes", v); }},
        {"max_connections", [](auto& c, const auto& v) {
             c.server.max_connections = std::max<std::uint64_t>(1, to_u64("max_connections", v));
         }},
        {"max_connections_per_address", [](auto& c, const auto& v) {
             c.server.max_connections_per_address = std::max<std::uint64_t>(1, to_u64("max_connections_per_address", v));
         }},
        {"log_level", [](auto& c, const auto& v) { c.log_level = v; }},
        {"io_threads", [](auto& c, const auto& v) { c.io_threads = static_cast<int>(to_u64("io_threads", v)); }},
        {"file_io_threads", [](auto& c, const auto& v) { c.file_io.threads = std::max<std::uint64_t>(1, to_u64("file_io_threads", v)); }},
        {"file_io_per_tenant", [](auto& c, const auto& v) { c.file_io.per_tenant_running = std::max<std::uint64_t>(1, to_u64("file_io_per_tenant", v)); }},
        {"default_kernelspec", [](auto& c, const auto& v) { c.default_kernelspec = v; }},
        {"node_tag", [](auto& c, const auto& v) { c.node_tag = v; }},
        {"etcd", [](auto& c, const auto& v) { c.etcd = v; }},
        {"node_address", [](auto& c, const auto& v) { c.node_address = v; }},
        {"lease_ttl", [](auto& c, const auto& v) { c.lease_ttl = to_u64("lease_ttl", v); }},
        {"tokens_file", [](auto& c, const auto& v) { load_tokens_file(c, v); }},
        {"static_dir", [](auto& c, const auto& v) { c.static_dir = v; }},
        {"e2b_domain", [](auto& c, const auto& v) { c.e2b.domain = v; }},
        {"state_db", [](auto& c, const auto& v) { c.state_db = v; }},
        {"launcher_socket", [](auto& c, const auto& v) { c.launcher_socket = v; }},
        {"pool_size", [](auto& c, const auto& v) { c.pool_size = to_u64("pool_size", v); }},
        {"pool_max", [](auto& c, const auto& v) { c.pool_max = to_u64("pool_max", v); }},
        {"pool_growth_window", [](auto& c, const auto& v) { c.manager.pool_growth_window = std::chrono::seconds(std::max<std::uint64_t>(1, to_u64("pool_growth_window", v))); }},
        {"pool_concurrency", [](auto& c, const auto& v) { c.manager.pool_concurrency = std::max<std::uint64_t>(1, to_u64("pool_concurrency", v)); }},
        {"pool_preload", [](auto& c, const auto& v) {
             c.manager.pool_preload.clear();
             std::stringstream in(v);
             for (std::string m; std::getline(in, m, ',');)
                 if (!m.empty()) c.manager.pool_preload.push_back(m);
         }},
        {"output_scripts", [](auto& c, const auto& v) { c.output_scripts = v == "true" || v == "1" || v == "yes"; }},
        {"max_sessions_per_tenant", [](auto& c, const auto& v) { c.manager.max_kernels_per_tenant = to_u64("max_sessions_per_tenant", v); }},
        {"max_launches_per_tenant", [](auto& c, const auto& v) { c.manager.max_launches_per_tenant = std::max<std::uint64_t>(1, to_u64("max_launches_per_tenant", v)); }},
        {"max_kernels_per_tenant", [](auto& c, const auto& v) { c.manager.max_kernels_per_tenant = to_u64("max_kernels_per_tenant", v); }},
        {"max_volumes_per_tenant", [](auto& c, const auto& v) { c.manager.max_volumes_per_tenant = to_u64("max_volumes_per_tenant", v); }},
        {"max_volume_bytes_per_tenant", [](auto& c, const auto& v) { c.manager.max_volume_bytes_per_tenant = to_u64("max_volume_bytes_per_tenant", v); }},
        {"max_snapshots_per_tenant", [](auto& c, const auto& v) { c.manager.max_snapshots_per_tenant = to_u64("max_snapshots_per_tenant", v); }},
        // The Jupyter surface's defaults (kernels started over /api/kernels and /api/sessions).
        {"cull_idle_timeout", [](auto& c, const auto& v) { c.manager.policies.jupyter.idle_timeout = std::chrono::seconds(to_u64("cull_idle_timeout", v)); }},
        {"jupyter_exec_timeout", [](auto& c, const auto& v) { c.manager.policies.jupyter.exec_timeout = std::chrono::seconds(to_u64("jupyter_exec_timeout", v)); }},
        {"jupyter_lifetime", [](auto& c, const auto& v) { c.manager.policies.jupyter.lifetime = std::chrono::seconds(to_u64("jupyter_lifetime", v)); }},
        {"jupyter_output_limit", [](auto& c, const auto& v) { c.manager.policies.jupyter.output_limit_bytes = to_u64("jupyter_output_limit", v); }},
        {"jupyter_result_limit", [](auto& c, const auto& v) { c.manager.policies.jupyter.result_limit_bytes = to_u64("jupyter_result_limit", v); }},
        {"cell_interrupt_grace", [](auto& c, const auto& v) { c.manager.cell_interrupt_grace = std::chrono::seconds(std::max<std::uint64_t>(1, to_u64("cell_interrupt_grace", v))); }},
        // The agent surface's defaults (/v1), and what a request may ask for.
        {"exec_timeout", [](auto& c, const auto& v) { c.agent.defaults.exec_timeout = std::chrono::seconds(to_u64("exec_timeout", v)); }},
        {"max_exec_timeout", [](auto& c, const auto& v) { c.agent.maxima.exec_timeout = std::chrono::seconds(to_u64("max_exec_timeout", v)); }},
        {"idle_timeout", [](auto& c, const auto& v) { c.agent.defaults.idle_timeout = std::chrono::seconds(to_u64("idle_timeout", v)); }},
        {"max_idle_timeout", [](auto& c, const auto& v) { c.agent.maxima.idle_timeout = std::chrono::seconds(to_u64("max_idle_timeout", v)); }},
        {"lifetime", [](auto& c, const auto& v) { c.agent.defaults.lifetime = std::chrono::seconds(to_u64("lifetime", v)); }},
        {"max_lifetime", [](auto& c, const auto& v) { c.agent.maxima.lifetime = std::chrono::seconds(to_u64("max_lifetime", v)); }},
        {"output_limit", [](auto& c, const auto& v) { c.agent.defaults.output_limit_bytes = to_u64("output_limit", v); }},
        {"max_output_limit", [](auto& c, const auto& v) { c.agent.maxima.output_limit_bytes = to_u64("max_output_limit", v); }},
        {"upload_limit", [](auto& c, const auto& v) { c.agent.defaults.upload_limit_bytes = to_u64("upload_limit", v); }},
        {"result_limit", [](auto& c, const auto& v) { c.agent.defaults.result_limit_bytes = to_u64("result_limit", v); }},
    };
    return table;
}

std::string scalar_text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    if (v.is_number()) return v.dump();
    throw config_error("expected a string, number or boolean");
}

kernels::kernelspec kernelspec_from(const std::string& name, const json& j) {
    if (!j.is_object()) throw config_error("kernelspecs." + name + " must be an object");
    auto k = name == "python3" ? kernels::default_python_kernelspec() : kernels::kernelspec{};
    k.name = name;
    k.display_name = j.value("display_name", k.display_name);
    k.image = j.value("image", k.image);
    k.runtime = j.value("runtime", k.runtime);
    k.language = j.value("language", k.language);
    if (j.contains("preload")) k.preload = j["preload"].get<std::vector<std::string>>();
    if (j.contains("limits")) from_json(j["limits"], k.limits);
    if (j.contains("start_timeout_s")) {
        const auto& t = j["start_timeout_s"];
        if (!t.is_number() || t.get<double>() < 1 || t.get<double>() > 600)
            throw config_error("kernelspecs." + name + ".start_timeout_s must be a number of seconds, 1…600");
        k.start_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(t.get<double>() * 1000));
    }
    return k;
}

void apply_file(gateway_config& c, const std::string& path) {
    std::ifstream in(path);
    if (!in) throw config_error("cannot read the config file " + path);
    const auto j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw config_error("the config file " + path + " is not a JSON object");
    for (const auto& [key, value] : j.items()) {
        if (key == "kernelspecs") {
            if (!value.is_object()) throw config_error("kernelspecs must be an object");
            c.kernelspecs.clear();
            c.manager.policies.by_kernelspec.clear();
            for (const auto& [name, spec] : value.items()) {
                c.kernelspecs.push_back(kernelspec_from(name, spec));
                if (const auto n = spec.find("network"); n != spec.end())
                    c.network.by_kernelspec[name] = network_layer(*n, "kernelspecs." + name + ".network");
                if (const auto p = spec.find("policy"); p != spec.end()) {
                    try {
                        c.manager.policies.by_kernelspec[name] =
                            kernels::policy_layer_from_json(*p, "kernelspecs." + name + ".policy");
                    } catch (const kernels::policy_error& e) {
                        throw config_error(std::string(e.what()) + " (in " + path + ")");
                    }
                }
            }
            continue;
        }
        if (key == "tokens") {
            if (!value.is_array()) throw config_error("tokens must be an array");
            for (const auto& t : value) {
                if (!t.is_object() || !t.contains("token") || !t["token"].is_string())
                    throw config_error("each entry of tokens in " + path + " needs a \"token\" string");
                http::token_entry e{t["token"].get<std::string>(), t.value("tenant", "default"),
                                    t.value("name", t.value("tenant", "default"))};
                // The tenant's own cap on kernels, as in the tokens file.
                if (const auto m = t.find("max_sessions"); m != t.end()) {
                    if (!m->is_number_unsigned()) throw config_error("tokens[].max_sessions must be a whole number");
                    e.max_sessions = m->get<std::size_t>();
                }
                e.is_operator = operator_flag(t, path);
                tenant_policy(c, e.tenant, t, path);
                tenant_network(c, e.tenant, t, path);
                c.tokens.push_back(std::move(e));
            }
            continue;
        }
        if (key == "egress_secrets") {
            auto h = injected_headers(value, path + ": egress_secrets");
            c.network.headers.insert(c.network.headers.end(), h.begin(), h.end());
            continue;
        }
        if (key == "egress_presets") {
            if (!value.is_object()) throw config_error("egress_presets must be an object {name: [entries]}");
            for (const auto& [name, list] : value.items()) c.network.presets[name] = list.get<std::vector<std::string>>();
            continue;
        }
        if ((key == "egress_upstream_ca" || key == "egress_resolve" || key == "egress_allow_internal") &&
            value.is_array()) {
            for (const auto& v : value) {
                if (!v.is_string()) throw config_error(key + " must be an array of strings");
                setters().at(key)(c, v.get<std::string>());
            }
            continue;
        }
        if (key == "allow_origins" && value.is_array()) {
            for (const auto& o : value) c.server.allow_origins.push_back(o.get<std::string>());
            continue;
        }
        const auto it = setters().find(key);
        if (it == setters().end()) throw config_error("unknown key '" + key + "' in " + path);
        try {
            it->second(c, scalar_text(value));
        } catch (const config_error& e) {
            throw config_error(std::string(e.what()) + " (in " + path + ")");
        }
    }
}

}  // namespace

gateway_config parse_config(int argc, char** argv, const char* env_token) {
    gateway_config c;
    c.kernelspecs = {kernels::default_python_kernelspec()};
    std::vector<std::pair<std::string, std::string>> cli;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") throw config_error(usage());
        if (a.rfind("--", 0) != 0) throw config_error("unexpected argument '" + a + "'");
        a = a.substr(2);
        std::string value;
        if (const auto eq = a.find('='); eq != std::string::npos) {
            value = a.substr(eq + 1);
            a = a.substr(0, eq);
        } else if (a == "no-auto-restart") {
            a = "auto_restart";
            value = "false";
        } else if (a == "check-config") {
            c.check_only = true;
            continue;
        } else {
            if (i + 1 >= argc) throw config_error("--" + a + " needs a value");
            value = argv[++i];
        }
        for (auto& ch : a)
            if (ch == '-') ch = '_';
        cli.emplace_back(a, value);
    }
    for (const auto& [k, v] : cli)
        if (k == "config") apply_file(c, v);
    const bool file_tokens = !c.tokens.empty();
    std::vector<http::token_entry> cli_tokens;
    for (const auto& [k, v] : cli) {
        if (k == "config") continue;
        const auto it = setters().find(k);
        if (it == setters().end()) throw config_error("unknown option --" + k + "\n" + usage());
        it->second(c, v);
    }
    (void)file_tokens;
    if (c.tokens.empty() && env_token != nullptr && *env_token != '\0')
        c.tokens.push_back({env_token, "default", "default", 0, true});
    if (c.certfile.has_value() != c.keyfile.has_value()) throw config_error("--certfile and --keyfile go together");
    // However it was given (review L6: only the tokens file used to check).
    for (const auto& t : c.tokens)
        if (t.token.size() < min_token_chars)
            throw config_error("a token needs " + std::to_string(min_token_chars) + " or more characters (tenant '" +
                               t.tenant + "')");
    if (!c.node_tag.empty() && !kernels::valid_node_tag(c.node_tag))
        throw config_error("--node-tag must be 8 lowercase hex digits (the first group of this node's ids)");
    if (!c.etcd.empty()) {
        if (c.node_tag.empty()) throw config_error("--etcd needs --node-tag (the first group of this node's ids)");
        try {
            cluster::etcd_client(cluster::etcd_client::parse_endpoints(c.etcd));
        } catch (const std::invalid_argument& e) {
            throw config_error(std::string("--etcd: ") + e.what());
        }
        if (c.lease_ttl < 2 || c.lease_ttl > 300) throw config_error("--lease-ttl is 2 to 300 seconds");
    }
    if (c.pool_size > 0) c.manager.pool_size[c.default_kernelspec] = c.pool_size;
    if (c.pool_max) {
        if (*c.pool_max < c.pool_size) throw config_error("--pool-max is below --pool-size");
        c.manager.pool_max[c.default_kernelspec] = *c.pool_max;
    }
    c.manager.policies.agent = c.agent.defaults;  // the /v1 surface's defaults, for the policy book
    if (c.egress && c.launcher.egress_root.empty()) c.launcher.egress_root = c.launcher.state_dir / "egress";
    if (!c.egress) c.launcher.egress_root.clear();
    // The public index unless the operator names a mirror (--egress-preset python-packages=pypi.internal).
    c.network.presets.try_emplace("python-packages", std::vector<std::string>{"pypi.org", "files.pythonhosted.org"});
    return c;
}

std::string usage() {
    return "usage: cellgate [--ip 127.0.0.1] [--port 8888] [--port-file PATH] [--token T | env CELLGATE_TOKEN]\n"
           "                [--certfile F --keyfile F] [--allow-origin ORIGIN]... [--config FILE.json]\n"
           "                [--state-dir D] [--state-db FILE|none] [--launcher-socket PATH] [--image-store D] [--workspace-root D] [--max-kernels N]\n"
           "                [--cgroup-parent NAME] [--uid-range-start UID] [--uid-range-slots N]\n"
           "                [--runsc-platform auto|kvm|ptrace] [--memory-merge on|off] [--zygote on|off]\n"
           "                [--iopub-msg-rate N] [--iopub-data-rate BYTES] [--no-auto-restart] [--log-level L] [--check-config]\n"
           "                [--node-tag HEX8] [--etcd http://H:P,…] [--node-address H:P] [--lease-ttl S] [--pool-size N] [--pool-max N] [--pool-growth-window S] [--pool-preload numpy,pandas,…] [--tokens-file F] [--max-kernels-per-tenant N]\n"
           "                [--io-threads N] [--file-io-threads N] [--file-io-per-tenant N]\n"
           "                [--exec-timeout S] [--idle-timeout S] [--lifetime S] [--output-limit BYTES] [--result-limit BYTES]\n"
           "                [--upload-limit BYTES] (the /v1 surface's defaults)\n"
           "                [--jupyter-exec-timeout S] [--jupyter-output-limit BYTES] [--jupyter-result-limit BYTES]\n"
           "                [--cull-idle-timeout S] [--jupyter-lifetime S] [--cell-interrupt-grace S] (the Jupyter surface's)\n"
           "                [--egress false] [--egress-root D] [--egress-resolve NAME=ADDR[:PORT]]... [--egress-allow-internal CIDR]...\n"
           "                [--egress-preset NAME=ENTRY,…] [--egress-tls-intercept credentials|all|off] [--egress-upstream-ca FILE]...\n"
           "                [--egress-pip-index-url URL] (docs/egress.md)\n"
           "The config file is a JSON object with the same names in snake_case, plus \"tokens\": [{token, tenant}]\n"
           "and \"kernelspecs\": {name: {display_name, image, runtime, preload, limits, policy}}; a token entry and a\n"
           "kernelspec may carry \"policy\": {exec_timeout, idle_timeout, lifetime, output_limit, result_limit,\n"
           "upload_limit, \"jupyter\": {…}, \"agent\": {…}} (0 = none), which overrides the surface's defaults.";
}

}  // namespace cellgate::config
