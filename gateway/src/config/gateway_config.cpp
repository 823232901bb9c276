#include "config/gateway_config.hpp"

#include "config/file_entries.hpp"
#include "config/options.hpp"

#include "cluster/etcd_client.hpp"
#include "kernels/node_id.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace cellgate::config {

namespace {

using nlohmann::json;

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
            c.kernelspecs_configured = true;
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
            auto h = injected_headers(value, path + ": egress_secrets", true);
            c.network.headers.insert(c.network.headers.end(), h.begin(), h.end());
            continue;
        }
        if (key == "egress_presets") {
            if (!value.is_object()) throw config_error("egress_presets must be an object {name: [entries]}");
            for (const auto& [name, list] : value.items()) c.network.presets[name] = list.get<std::vector<std::string>>();
            continue;
        }
        if ((key == "egress_upstream_ca" || key == "egress_resolve" || key == "egress_allow_internal" ||
             key == "trusted_proxy") &&
            value.is_array()) {
            for (const auto& v : value) {
                if (!v.is_string()) throw config_error(key + " must be an array of strings");
                find_option(key)->set(c, v.get<std::string>());
            }
            continue;
        }
        if (key == "allow_origins" && value.is_array()) {
            for (const auto& o : value) c.server.allow_origins.push_back(o.get<std::string>());
            continue;
        }
        const auto* o = find_option(key);
        if (o == nullptr || !o->set) throw config_error("unknown key '" + key + "' in " + path);
        try {
            o->set(c, scalar_text(value));
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
        if (a == "--config-reference") {
            c.reference_only = true;
            return c;
        }
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
    for (const auto& [k, v] : cli) {
        if (k == "config") continue;
        const auto* o = find_option(k);
        if (o == nullptr || !o->set) {
            auto typed = k;
            std::replace(typed.begin(), typed.end(), '_', '-');
            throw config_error("unknown option --" + typed +
                               " (cellgate --help lists every option; docs/configuration.md explains each)");
        }
        o->set(c, v);
    }
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
        // etcd over TLS with a client certificate, and peers that sign what
        // they ask of each other, or no cluster (review turn 3, H4).
        for (const auto& e : cluster::etcd_client::parse_endpoints(c.etcd))
            if (e.rfind("https://", 0) != 0)
                throw config_error("--etcd: an etcd endpoint is https://host:port (etcd with TLS and client "
                                   "certificates), not '" + e.substr(0, 100) + "'");
        if (c.etcd_ca.empty() || c.etcd_cert.empty() || c.etcd_key.empty())
            throw config_error("--etcd needs --etcd-ca, --etcd-cert and --etcd-key (etcd is reached over TLS with "
                               "this node's client certificate)");
        if (c.cluster_secret_file.empty())
            throw config_error("--etcd needs --cluster-secret-file (the secret the cluster's nodes sign their "
                               "records and requests with)");
        try {
            cluster::etcd_client::split_endpoints(cluster::etcd_client::parse_endpoints(c.etcd), true);
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
    for (const auto& [name, n] : c.kernelspec_pools) {
        if (n > 0) c.manager.pool_size[name] = n;
        else c.manager.pool_size.erase(name);
    }
    c.manager.policies.agent = c.agent.defaults;  // the /v1 surface's defaults, for the policy book
    if (c.egress && c.launcher.egress_root.empty()) c.launcher.egress_root = c.launcher.state_dir / "egress";
    if (!c.egress) c.launcher.egress_root.clear();
    // The public index unless the operator names a mirror (--egress-preset python-packages=pypi.internal).
    c.network.presets.try_emplace("python-packages", std::vector<std::string>{"pypi.org", "files.pythonhosted.org"});
    return c;
}

}  // namespace cellgate::config
