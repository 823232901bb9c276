#include "config/file_entries.hpp"

#include "config/options.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>

namespace cellgate::config {

using nlohmann::json;

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

std::vector<egress::injected_header> injected_headers(const json& j, const std::string& where, bool operator_wide) {
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
        if (const auto v = e.find("plain_http"); v != e.end()) {
            if (!v->is_boolean()) throw config_error(where + ": \"plain_http\" must be true or false");
            h.plain_http = v->get<bool>();
        }
        if (const auto v = e.find("methods"); v != e.end()) {
            if (!v->is_array() || v->empty()) throw config_error(where + ": \"methods\" must be a non-empty array of HTTP methods");
            for (const auto& m : *v) {
                const auto name = m.is_string() ? m.get<std::string>() : std::string();
                if (name.empty() || name.size() > 16 ||
                    !std::all_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
                    throw config_error(where + ": \"methods\" holds an HTTP method in upper case each, e.g. \"GET\"");
                if (name == "TRACE" || name == "TRACK" || name == "CONNECT")
                    throw config_error(where + ": a secret is never sent with " + name + " (it would come back to the code)");
                h.methods.push_back(name);
            }
        }
        if (operator_wide) {
            // Bound to tenants, or explicitly to all: never to everyone by default.
            const auto t = e.find("tenants");
            if (t == e.end())
                throw config_error(where + ": each entry needs \"tenants\": the tenants it is for, or \"*\" for all");
            if (t->is_string() && t->get<std::string>() == "*") {
                h.all_tenants = true;
            } else if (t->is_array() && !t->empty() &&
                       std::all_of(t->begin(), t->end(), [](const json& x) { return x.is_string() && !x.get<std::string>().empty(); })) {
                h.tenants = t->get<std::vector<std::string>>();
            } else {
                throw config_error(where + ": \"tenants\" must be a non-empty array of tenant names, or \"*\"");
            }
        } else if (e.contains("tenants")) {
            throw config_error(where + ": a tenant's own secret is its own; \"tenants\" belongs in egress_secrets");
        }
        out.push_back(std::move(h));
    }
    return out;
}

void tenant_network(gateway_config& c, const std::string& tenant, const json& entry, const std::string& where) {
    if (const auto n = entry.find("network"); n != entry.end())
        c.network.tenant_max[tenant] = network_layer(*n, where + ": tokens[" + tenant + "].network");
    if (const auto s = entry.find("secrets"); s != entry.end()) {
        auto h = injected_headers(*s, where + ": tokens[" + tenant + "].secrets", false);
        auto& into = c.network.tenant_headers[tenant];
        into.insert(into.end(), h.begin(), h.end());
    }
}

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

// What apply_file (gateway_config.cpp) and the functions above read, for
// the reference. Each sample is a whole config file that parses.
std::vector<option> file_only_options() {
    constexpr auto file_only = option_kind::file_only;
    return {
        {.name = "tokens", .section = heading::file_only, .kind = file_only, .value = "[{…}, …]", .fallback = "none",
         .help = "Tokens and their tenants, for several tenants on one gateway; added to `--token`'s. Each entry: "
                 "`token` (required, 8 or more characters); `tenant` (default `default`); `name` (default the "
                 "tenant); `max_sessions`, a whole number: the tenant's own cap on kernels in place of "
                 "`--max-kernels-per-tenant` (`0`: that default); `operator`, `true` or `false`: whether it may "
                 "read `/metrics`; `policy`, the tenant's limits; `network`, `{\"allow\": […], \"deny\": […]}`, "
                 "the most any of the tenant's sessions may reach; `secrets`, credentials the proxy adds for "
                 "the tenant's sessions, as in [`egress_secrets`](#egress_secrets). A policy sets any of "
                 "`exec_timeout`, `idle_timeout`, `lifetime` (seconds), `output_limit`, `result_limit`, "
                 "`upload_limit` (bytes), `on_idle` (`\"delete\"` or `\"pause\"`) and `auto_resume`, for both "
                 "surfaces or, under `jupyter` or `agent`, for one; `0` means none. It applies over the "
                 "surface's defaults and the kernelspec's policy, and is given on one of the tenant's entries. "
                 "A `/v1` request may still ask for values up to the server's maxima, or up to what the policy "
                 "allows when that is more. In the example, tenant `lab` (people in JupyterLab who run long "
                 "cells) has no time or output limit on the Jupyter surface, and idle `/v1` sessions of `bots` "
                 "are paused instead of deleted.",
         .sample = R"json({
  "tokens": [
    {"token": "CHANGE-ME-operator-token", "tenant": "ops", "operator": true},
    {"token": "CHANGE-ME-lab-token", "tenant": "lab", "name": "JupyterLab users", "max_sessions": 8,
     "policy": {"idle_timeout": 7200, "jupyter": {"exec_timeout": 0, "output_limit": 0}},
     "network": {"allow": ["pypi.org", "files.pythonhosted.org", "api.example.com"]},
     "secrets": [{"domain": "api.example.com", "bearer_env": "LAB_API_TOKEN"}]},
    {"token": "CHANGE-ME-bots-token", "tenant": "bots", "policy": {"agent": {"on_idle": "pause"}}}
  ]
}
)json"},
        {.name = "kernelspecs", .section = heading::file_only, .kind = file_only, .value = "{name: {…}, …}",
         .fallback = "`python3` alone",
         .help = "The kernels the gateway offers, by name. Given, it replaces the built-in `python3` (name it, "
                 "even as `{}`, to keep it); an entry named `python3` starts from the built-in one. Each entry: "
                 "`display_name`; `image`, a name in `--image-store` (default `python`); `runtime`, `runc` "
                 "(the default) or `runsc` (gVisor); `language` (default `python`); `preload`, modules "
                 "imported at start; `limits`, the sandbox's: `memory_bytes` (2 GiB), `pids` (256), "
                 "`cpu_millis` (1000, one core), `workspace_bytes` (1 GiB), `tmp_bytes` (256 MiB), `nofile` "
                 "(4096), `fsize_bytes` (0: the larger of workspace and tmp), `cpu_shares` (1024); `policy`, "
                 "limits for its sessions, as on a [token entry](#tokens); `network`, `{\"allow\": […], "
                 "\"deny\": […]}`, the most its sessions may reach; `start_timeout_s`, 1–600 (default 30): "
                 "how long a start (sandbox, kernel, first `kernel_info` answer) may take before it is given "
                 "up and its sandbox removed. The kernel's command comes from the image's `kernel.json` for "
                 "that name.",
         .sample = R"json({
  "default_kernelspec": "python3",
  "kernelspecs": {
    "python3": {"policy": {"exec_timeout": 120, "agent": {"output_limit": 262144}}},
    "python-gvisor": {
      "display_name": "Python 3 (gVisor)", "image": "python", "runtime": "runsc", "language": "python",
      "preload": ["numpy", "pandas"],
      "limits": {"memory_bytes": 4294967296, "cpu_millis": 2000, "pids": 512, "workspace_bytes": 2147483648},
      "network": {"allow": ["pypi.org", "files.pythonhosted.org"]},
      "start_timeout_s": 60
    }
  }
}
)json"},
        {.name = "egress_secrets", .section = heading::file_only, .kind = file_only, .value = "[{…}, …]",
         .fallback = "none",
         .help = "Credentials the proxy adds to requests for a domain, for the sessions of the tenants each "
                 "names, inside the HTTPS it terminates for that domain, replacing a header of that name the "
                 "code sent; the value lives only in the gateway's memory, never in the sandbox. Each entry: "
                 "`domain`, a host name or `*.` wildcard; then `header` with `value`, or `bearer` (sent as "
                 "`Authorization: Bearer …`); `value_env` and `bearer_env` name a variable of the gateway's "
                 "environment instead, which must be set; `tenants`, the tenants it is for, or `\"*\"` for "
                 "all (required). `plain_http: true` also sends it over plain HTTP (in the clear); `methods` "
                 "names the methods that get it (default: all but `TRACE`, `TRACK` and `CONNECT`, which never "
                 "do). An upstream that echoes request headers back shows the value to the code.",
         .sample = R"json({
  "egress_secrets": [
    {"domain": "api.example.com", "header": "X-Api-Key", "value_env": "EXAMPLE_KEY", "tenants": ["alpha"]},
    {"domain": "*.internal.example", "bearer": "CHANGE-ME", "tenants": "*", "methods": ["GET", "POST"]}
  ]
}
)json"},
        {.name = "egress_presets", .section = heading::file_only, .kind = file_only, .value = "{name: […], …}",
         .fallback = "`python-packages` (`pypi.org`, `files.pythonhosted.org`)",
         .help = "Named allow lists a session's network may ask for by name, as `--egress-preset`. Naming "
                 "`python-packages` points pip's preset at a mirror.",
         .sample = R"json({
  "egress_presets": {
    "python-packages": ["pypi.internal", "files.internal"],
    "github": ["github.com", "*.githubusercontent.com"]
  }
}
)json"},
        {.name = "allow_origins", .section = heading::file_only, .kind = file_only, .value = "[ORIGIN, …]",
         .fallback = "none",
         .help = "Browser origins allowed besides the gateway's own, as `--allow-origin` given once for each. "
                 "`egress_resolve`, `egress_allow_internal` and `egress_upstream_ca` take an array the same way.",
         .sample = R"json({
  "allow_origins": ["https://lab.example.com", "http://localhost:8000"],
  "egress_upstream_ca": ["/etc/ssl/internal-ca.pem", "/etc/ssl/mirror-ca.pem"]
}
)json"},
    };
}

}  // namespace cellgate::config
