#pragma once

// The structured entries of a config file and a tokens file: token entries
// (a tenant's policy, operator flag, network and secrets), network layers and
// injected credentials. Shared by the option table (--tokens-file) and the
// config file's own keys (gateway_config.cpp).

#include "config/gateway_config.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cellgate::config {

// A tenant's limits (kernels/policy.hpp), from its token entry. Given once per
// tenant: two entries for one tenant with different limits would be ambiguous.
void tenant_policy(gateway_config& c, const std::string& tenant, const nlohmann::json& entry, const std::string& where);

bool operator_flag(const nlohmann::json& entry, const std::string& where);

// {"allow": […], "deny": […]}.
egress::policy network_layer(const nlohmann::json& j, const std::string& where);

// [{"domain": "api.example.com", "header": "X-Api-Key", "value": "…"} |
//  {"domain": …, "bearer": "…"}, with "value_env"/"bearer_env" naming an
// environment variable of the gateway instead of the value itself].
// `operator_wide`: an egress_secrets entry, which must name its "tenants" (or "*").
std::vector<egress::injected_header> injected_headers(const nlohmann::json& j, const std::string& where, bool operator_wide);

// A tokens entry's "network" (the tenant's maximum) and "secrets".
void tenant_network(gateway_config& c, const std::string& tenant, const nlohmann::json& entry, const std::string& where);

// A tokens file: [{"token": … (8+ characters), "tenant": …, "name"?, "max_sessions"?,
//                  "operator"?, "policy"?, "network"?, "secrets"?}, …].
void load_tokens_file(gateway_config& c, const std::string& path);

}  // namespace cellgate::config
