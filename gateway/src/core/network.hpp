#pragma once

// A session's network: the policy a session is created with (whichever
// door it came through), what the operator caps it at, the proxy's rules
// for it, and its log. The /v1 routes that show and change it at run time
// are v1/network_api.cpp's.
//
// A session's "network" field: {"allow": [entries], "deny": [entries],
// "preset": "python-packages" | ["…"]}; entries as egress/policy.hpp takes
// them. Normalised and checked here (400 naming the bad entry), kept with
// the kernel as {"allow", "deny", "presets"}. The proxy judges every
// connection by the session's layer, then the kernelspec's, then the
// tenant's maximum: each must allow, so a session never widens its tenant.

#include "core/egress_log_writer.hpp"
#include "egress/proxy.hpp"
#include "kernels/kernel.hpp"
#include "kernels/state_store.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace cellgate::core {

struct network_settings {
    egress::proxy* proxy = nullptr;  // null: no session may have a network
    std::map<std::string, egress::policy> tenant_max;     // by tenant
    std::map<std::string, egress::policy> by_kernelspec;  // by kernelspec name
    // Named allow lists a session asks for by name, e.g. "python-packages".
    std::map<std::string, std::vector<std::string>> presets;
    // Headers the proxy adds for a domain: the operator's for every tenant,
    // then each tenant's own.
    std::vector<egress::injected_header> headers;
    std::map<std::string, std::vector<egress::injected_header>> tenant_headers;
    // What the sandbox gets in /run/egress beside the socket: the CA it
    // trusts for the TLS the proxy terminates, and pip's index.
    std::string ca_pem;
    std::string pip_index_url;
    kernels::state_store* store = nullptr;  // the run-time changes and the log survive a restart here
    // The egress log's writer (keep_egress_log makes it): stopped before the store goes.
    std::shared_ptr<egress_log_writer> log_writer;
    std::size_t log_queue = 10000;  // records waiting for it, at most (past it: dropped and counted)
};

// {"allow", "deny", "presets"} from a request's "network" value; throws
// api_exception(400) saying what is wrong.
nlohmann::json normalize_network(const nlohmann::json& network, const network_settings& settings);

// What the proxy enforces for a kernel with that (normalized) network.
egress::session_rules rules_for(const nlohmann::json& network, const kernels::kernel& k, const network_settings& settings);

// The kernel's network as it stands now (run-time changes included).
nlohmann::json current_network(const kernels::kernel& k, const network_settings& settings);

// Makes the proxy listen in `dir` for this kernel (the kernel manager's
// on_egress hook), with the log a previous gateway kept.
void attach_egress(const kernels::kernel& k, const std::filesystem::path& dir, network_settings& settings);
// Ends the kernel's listener and removes its directory and records.
void detach_egress(const std::string& kernel_id, const std::filesystem::path& egress_root, network_settings& settings);

// The connections a session's code made between two times (Unix ms), for an
// execution's ledger record: counts, bytes and each host:port with its
// verdict (at most 20); null when the session has no network.
nlohmann::json egress_summary(const std::string& kernel_id, std::int64_t from_ms, std::int64_t to_ms,
                              const network_settings& settings);

// Keeps every connection record the proxy makes in the state store (the
// last 1,000 per session), so a restarted gateway still shows the log.
void keep_egress_log(network_settings& settings);

}  // namespace cellgate::core
