#pragma once

#include "templates/template_store.hpp"
#include "agent/agent_service.hpp"
#include "core/network.hpp"
#include "egress/proxy.hpp"
#include "e2b/e2b_api.hpp"
#include "mcp/mcp_api.hpp"
#include "piston/piston_api.hpp"
#include "core/runs.hpp"
#include "processes/process_table.hpp"
#include "util/file_io_pool.hpp"
#include "cellgate/launcher/launcher_config.hpp"
#include "http/auth.hpp"
#include "http/server_options.hpp"
#include "kernels/kernel_manager.hpp"
#include "kernels/kernelspecs.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cellgate::config {

struct gateway_config {
    http::server_options server;
    std::optional<std::string> port_file;
    std::vector<http::token_entry> tokens;  // empty: one token is generated and printed
    std::optional<std::string> certfile, keyfile;
    launcher::launcher_config launcher;
    kernels::manager_config manager;
    agent::agent_limits agent;
    std::vector<kernels::kernelspec> kernelspecs;
    // The config file named its kernelspecs: the built-in languages are not added.
    bool kernelspecs_configured = false;
    std::string default_kernelspec = "python3";
    // This node's tag in a cluster: the first group of every id it makes
    // (kernels/node_id.hpp). Empty: plain random ids.
    std::string node_tag;
    // --check-config: parse and check everything given, say so, and exit (0 or 2).
    bool check_only = false;
    // --config-reference: print configuration_reference() and exit 0.
    bool reference_only = false;
    // A cluster node's etcd members (http://host:port,…; needs node_tag), the
    // address peers and the router reach it at (default ip:port), and its
    // lease's TTL in seconds.
    std::string etcd;
    // How the node proves itself (security review turn 3, H4): the CA that
    // signed etcd's certificates, this node's client certificate and key for
    // etcd, and the file of the secret the cluster's nodes share. All four
    // are required with `etcd`; main() reads the files before it listens.
    std::string etcd_ca, etcd_cert, etcd_key;
    std::string cluster_secret_file;
    std::string node_address;
    std::uint64_t lease_ttl = 10;
    std::string log_level = "info";
    int io_threads = 0;  // 0: one per core, at least 2
    util::file_io_pool::options file_io;  // threads for file-system work, and each tenant's share
    processes::process_limits processes;  // commands, terminals, E2B processes and contexts
    std::uint64_t upload_staging_per_tenant = 1ull << 30;  // archive uploads being staged, per tenant
    templates::store_options templates;  // tenants' templates and their builds (docs/templates.md)
    std::size_t pool_size = 2;    // warm sandboxes kept for the default kernelspec
    // How far misses may raise that pool for a while (unset: 4 × pool_size).
    std::optional<std::size_t> pool_max;
    std::map<std::string, std::size_t> kernelspec_pools;  // --pool NAME=N: other kernelspecs' pools
    std::string static_dir;       // serve the chat page from here (development)
    // The session registry's database; "" = <state_dir>/gateway.db, "none" = memory only
    // (a restarted gateway then removes every sandbox it finds).
    std::string state_db;
    // The privileged launcher service's socket (cellgate-launchd); empty: the
    // launcher runs inside this process, which then needs root.
    std::string launcher_socket;
    e2b::e2b_options e2b;         // the E2B surface (--e2b-domain)
    mcp::mcp_options mcp;         // the MCP endpoint (/mcp)
    piston::piston_options piston;  // Piston's /api/v2
    core::run_limits runs;          // one-shot runs (Piston, /v1/execute's language)
    std::size_t runtime_pool = 2;   // warm sandboxes for the built-in runtimes
    bool output_scripts = false;  // let HTML outputs in the chat page run scripts (sandboxed frames)
    // Egress (docs/egress.md): the proxy's options, and the caps, presets and
    // injected credentials sessions' networks live under.
    bool egress = true;  // false: no session may have a network
    egress::proxy_options egress_proxy;
    std::string egress_tls_intercept = "credentials";  // credentials | all | off
    core::network_settings network;
};

// The shortest token accepted from any source (--token, CELLGATE_TOKEN, a
// config file's "tokens", a tokens file).
inline constexpr std::size_t min_token_chars = 8;

class config_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Command line over config file over defaults. `env_token` is CELLGATE_TOKEN.
// Throws config_error with a message naming the bad option. The options are
// those of the table in options.hpp.
gateway_config parse_config(int argc, char** argv, const char* env_token);

// What --help prints: every option with its default and the first sentence
// of its help, by section, in plain text.
std::string usage();

// The whole reference in Markdown, from the same table: docs/configuration.md
// is its output (`cellgate --config-reference`).
std::string configuration_reference();

}  // namespace cellgate::config
