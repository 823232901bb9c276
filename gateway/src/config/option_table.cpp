#include "config/options.hpp"

#include "config/file_entries.hpp"

#include "cellgate/launcher/node_settings.hpp"

#include <algorithm>
#include <sstream>

// The options given on the command line (--kebab-case) or as a config file's
// scalar (snake_case key): one entry each, its facts beside its setter. A
// help says what the setter and the code it feeds do; a default is that of
// the member the setter writes.

namespace cellgate::config {

namespace {

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

std::uint64_t at_least_1(const std::string& key, const std::string& v) { return std::max<std::uint64_t>(1, to_u64(key, v)); }
std::chrono::seconds secs(const std::string& key, const std::string& v) { return std::chrono::seconds(to_u64(key, v)); }
bool yes(const std::string& v) { return v == "true" || v == "1" || v == "yes"; }

void node_option(gateway_config& c, const std::string& name, const std::string& v) {
    try {
        launcher::apply_node_option(c.launcher, name, v);
    } catch (const std::exception& e) {
        throw config_error(e.what());
    }
}

// An http:// or https:// URL of at most 1024 bytes with no whitespace (a package index), else config_error naming `flag`.
std::string http_url(const std::string& flag, const std::string& v) {
    if ((!v.starts_with("https://") && !v.starts_with("http://")) || v.size() > 1024 ||
        v.find_first_of(" \t\r\n") != std::string::npos)
        throw config_error(flag + " wants an http(s):// URL, not '" + v.substr(0, 100) + "'");
    return v;
}

std::vector<std::string> comma_list(const std::string& v) {
    std::vector<std::string> out;
    std::stringstream in(v);
    for (std::string e; std::getline(in, e, ',');)
        if (!e.empty()) out.push_back(e);
    return out;
}

// "name=value" → {name, value}; `form` says what the flag wants when it is not that.
std::pair<std::string, std::string> assignment(const std::string& v, const char* form) {
    const auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0) throw config_error(form);
    return {v.substr(0, eq), v.substr(eq + 1)};
}

constexpr auto cli = option_kind::command_line;

}  // namespace

std::vector<option> command_line_options() {
    return {
        // Running cellgate: parse_config handles these itself.
        {.name = "config", .section = heading::running, .kind = cli, .value = "FILE", .fallback = "none",
         .help = "A JSON config file: one object whose keys are the options' names in snake_case "
                 "(`{\"port\": 8080, \"max_kernels\": 32}`), plus the keys [only a config file "
                 "takes](#the-config-file-only). It is read before the other options, so the command line "
                 "wins; given twice, both are read, in order. An unknown key stops the gateway with a message "
                 "naming it."},
        {.name = "check_config", .section = heading::running, .kind = cli, .fallback = "—",
         .help = "Parse and check the configuration, and exit: 0 when it is valid (saying so), 2 with what is "
                 "wrong; nothing starts. It checks values and how they combine (a "
                 "token's length, `--certfile` with `--keyfile`, `--etcd` with `--node-tag`, `--pool-max` "
                 "against `--pool-size`), not the host: images, directories, runtimes and the id range against "
                 "`/etc/subuid` are checked when the gateway starts."},
        {.name = "config_reference", .section = heading::running, .kind = cli, .fallback = "—",
         .help = "Print this reference (Markdown) to standard output and exit 0. `docs/configuration.md` is "
                 "its output: `build/bin/cellgate --config-reference > docs/configuration.md`."},
        {.name = "help", .section = heading::running, .kind = cli, .fallback = "—",
         .help = "Print the options in short, with their defaults, and exit. Like a bad option, it goes to "
                 "standard error with exit status 2; `-h` is the same."},

        // Listening and auth
        {.name = "ip", .section = heading::listening, .value = "ADDR", .fallback = "`127.0.0.1`",
         .help = "The address to listen on.",
         .sample = "127.0.0.2",
         .set = [](auto& c, const auto& v) { c.server.ip = v; }},
        {.name = "port", .section = heading::listening, .value = "N", .fallback = "`8888`",
         .help = "The TCP port to listen on, 0…65535. `0` picks a free port: the gateway logs the one it "
                 "bound, and `--port-file` writes it.",
         .sample = "0",
         .set = [](auto& c, const auto& v) {
             const auto p = to_u64("port", v);
             if (p > 65535) throw config_error("port must be 0…65535");
             c.server.port = static_cast<unsigned short>(p);
         }},
        {.name = "port_file", .section = heading::listening, .value = "PATH", .fallback = "none",
         .help = "Once listening, write the port bound (and a newline) to this file: for scripts and tests "
                 "that pass `--port 0`.",
         .sample = "/tmp/cellgate.port",
         .set = [](auto& c, const auto& v) { c.port_file = v; }},
        {.name = "token", .section = heading::listening, .value = "TOKEN",
         .fallback = "`CELLGATE_TOKEN`, else one made and printed at start",
         .help = "The operator's token: tenant `default`, and it may read `/metrics`. Repeatable; 8 or more "
                 "characters. When no token comes from `--token`, the config file or `--tokens-file`, the "
                 "gateway takes `CELLGATE_TOKEN` from its environment, and without that it makes one and "
                 "prints it. Clients send a token as `Authorization: token …` or `Bearer …`, or as `?token=` "
                 "where they cannot set headers (browsers' WebSockets); it is compared in constant time.",
         .sample = "op-token-1",
         .set = [](auto& c, const auto& v) {
             if (v.empty()) throw config_error("token must not be empty");
             c.tokens.push_back({v, "default", "default", 0, true});
         }},
        {.name = "tokens_file", .section = heading::listening, .value = "PATH", .fallback = "none",
         .help = "Read tokens from this JSON file: an array of entries like the config file's "
                 "[`tokens`](#tokens), except that each needs a `tenant`. The tokens can then live apart from "
                 "the rest of the configuration (a Kubernetes secret, a file only root reads).",
         .sample = "/etc/cellgate/tokens.json",
         .set = [](auto& c, const auto& v) { load_tokens_file(c, v); }},
        {.name = "certfile", .section = heading::listening, .value = "PATH", .fallback = "none (plain HTTP)",
         .help = "Serve HTTPS (TLS 1.2 or later) with this PEM certificate chain; needs `--keyfile`.",
         .sample = "/etc/cellgate/cert.pem",
         .set = [](auto& c, const auto& v) { c.certfile = v; }},
        {.name = "keyfile", .section = heading::listening, .value = "PATH", .fallback = "none",
         .help = "The PEM private key of `--certfile`; the two go together.",
         .sample = "/etc/cellgate/key.pem",
         .set = [](auto& c, const auto& v) { c.keyfile = v; }},
        {.name = "allow_origin", .section = heading::listening, .value = "ORIGIN", .fallback = "none (the gateway's own origin only)",
         .help = "A browser origin allowed besides the gateway's own (`https://lab.example.com`; `*` allows "
                 "any): its requests get CORS answers, and its WebSockets and MCP requests are accepted. "
                 "Repeatable; in the config file also [`allow_origins`](#allow_origins), an array.",
         .sample = "https://lab.example.com",
         .set = [](auto& c, const auto& v) { c.server.allow_origins.push_back(v); }},

        // State and sandboxes
        {.name = "state_dir", .section = heading::state, .value = "DIR", .fallback = "`/run/cellgate`",
         .help = "The launcher's run state (sandboxes' run directories, the runtimes' state, id slots), and "
                 "the default home of the state database, the egress proxy's sockets (`egress/`) and its CA "
                 "(`egress-ca/`).",
         .sample = "/tmp/cellgate",
         .set = [](auto& c, const auto& v) { c.launcher.state_dir = v; }},
        {.name = "state_db", .section = heading::state, .value = "FILE|none", .fallback = "`<state-dir>/gateway.db`",
         .help = "The session registry (SQLite, WAL): kernels, Jupyter and `/v1` sessions, snapshots, volumes "
                 "and egress logs, so that a gateway killed and started again on the same state takes its "
                 "sandboxes back; budgeted executions' whole outputs are kept beside it (`outputs/`). `none` "
                 "keeps it in memory: a restarted gateway then removes every sandbox it finds.",
         .sample = "none",
         .set = [](auto& c, const auto& v) { c.state_db = v; }},
        {.name = "image_store", .section = heading::state, .value = "DIR", .fallback = "`/var/cache/cellgate/images`",
         .help = "Where kernel images live, as `images/build.sh` leaves them (`<image>/current/rootfs`); a "
                 "kernelspec's `image` is a name here.",
         .sample = "/tmp/images",
         .set = [](auto& c, const auto& v) { c.launcher.image_store = v; }},
        {.name = "workspace_root", .section = heading::state, .value = "DIR", .fallback = "`/var/lib/cellgate/workspaces`",
         .help = "Where sessions' workspaces (the size-capped file systems mounted at `/workspace`) are kept.",
         .sample = "/tmp/workspaces",
         .set = [](auto& c, const auto& v) { c.launcher.workspace_root = v; }},
        {.name = "runc", .section = heading::state, .value = "PATH", .fallback = "`runc`, found in `PATH`",
         .help = "The runc binary the launcher in this process runs. With `--launcher-socket`, "
                 "`cellgate-launchd --runc` counts instead.",
         .sample = "/usr/sbin/runc",
         .set = [](auto& c, const auto& v) { c.launcher.runc_path = v; }},
        {.name = "launcher_socket", .section = heading::state, .value = "PATH",
         .fallback = "none (the launcher runs in this process, which needs root)",
         .help = "Start sandboxes through the privileged launcher service, `cellgate-launchd`, on this unix "
                 "socket, so that the gateway runs without root. The per-node options that count are then "
                 "the service's ([below](#with-cellgate-launchd)).",
         .sample = "/run/cellgate/launcher.sock",
         .set = [](auto& c, const auto& v) { c.launcher_socket = v; }},

        // Sandboxes on this node: the launcher's own parsing (node_settings.hpp), shared with cellgate-launchd.
        {.name = "cgroup_parent", .section = heading::node, .value = "NAME", .fallback = "`cellgate`",
         .help = "Sandboxes' cgroups are `/<parent>/<id>`, and start-up reaping looks only there: 1–4 names of "
                 "`[A-Za-z0-9._-]` joined by `/`. Two instances on one host need different parents, neither "
                 "inside the other.",
         .sample = "cellgate-b",
         .set = [](auto& c, const auto& v) { node_option(c, "--cgroup-parent", v); }},
        {.name = "uid_range_start", .section = heading::node, .value = "UID", .fallback = "`1000000`",
         .help = "The first host id of this node's range: workspace `n` maps to the host ids from `start + n·65536` "
                 "on, 65,536 of them, so no two sessions share a host uid. Two instances on one host need "
                 "disjoint ranges. The range must lie within 65536 … 2^32−2 and overlap no entry of "
                 "`/etc/subuid` or `/etc/subgid`, or the gateway does not start.",
         .sample = "500000000",
         .set = [](auto& c, const auto& v) { node_option(c, "--uid-range-start", v); }},
        {.name = "uid_range_slots", .section = heading::node, .value = "N", .fallback = "`4096`",
         .help = "Workspaces the range holds at most, 1…65536: the range is `slots × 65536` ids from "
                 "`--uid-range-start`.",
         .sample = "8",
         .set = [](auto& c, const auto& v) { node_option(c, "--uid-range-slots", v); }},
        {.name = "runsc_platform", .section = heading::node, .value = "auto|kvm|ptrace|systrap", .fallback = "`auto`",
         .help = "gVisor's platform, for kernelspecs whose `runtime` is `runsc`. `auto` runs `ptrace` until a "
                 "bounded background probe (5 s, once per boot) has seen runsc run a process on `kvm`, and "
                 "never delays a start; `kvm`, `ptrace` and `systrap` force one (a forced `kvm` without "
                 "`/dev/kvm` stops the gateway at start). Sessions report theirs as `sandbox.platform`, "
                 "`/metrics` as `cellgate_sandboxes{runtime,platform}` and why as "
                 "`cellgate_runsc_platform_info`.",
         .sample = "ptrace",
         .set = [](auto& c, const auto& v) { node_option(c, "--runsc-platform", v); }},
        {.name = "memory_merge", .section = heading::node, .value = "on|off", .fallback = "`off`",
         .help = "`on`: runc kernels start with a fixed address layout and `PYTHONHASHSEED=0` and opt into KSM, "
                 "so the host's ksmd (`scripts/ksm.sh on`) keeps one copy of what every kernel imports. It "
                 "opens a cross-session timing side channel: read [memory.md](memory.md) and "
                 "[SECURITY.md](../SECURITY.md) first. Sessions report it as `sandbox.memory_merge`.",
         .sample = "on",
         .set = [](auto& c, const auto& v) { node_option(c, "--memory-merge", v); }},
        {.name = "zygote", .section = heading::node, .value = "on|off", .fallback = "`off`",
         .help = "`on`: runc kernels are forked from one pre-imported Python per image (the zygote) into the "
                 "sandbox made for each, instead of importing in it: a start costs about two thirds of the CPU "
                 "and the kernels share their imports' pages. Kernels forked from one zygote share its address "
                 "layout, hash seed and stack canary: read [memory.md](memory.md) and "
                 "[SECURITY.md](../SECURITY.md) first. Where it cannot serve (runsc, `--memory-merge on`, a CPU "
                 "quota above one core, while it imports) a kernel starts cold; sessions report which as "
                 "`sandbox.zygote`.",
         .sample = "on",
         .set = [](auto& c, const auto& v) { node_option(c, "--zygote", v); }},

        // Admission and quotas
        {.name = "max_kernels", .section = heading::admission, .value = "N", .fallback = "`64`",
         .help = "Kernels on this node, starts under way included.",
         .sample = "32",
         .set = [](auto& c, const auto& v) { c.manager.max_kernels = to_u64("max_kernels", v); }},
        {.name = "max_kernels_per_tenant", .section = heading::admission, .value = "N", .fallback = "`16`",
         .help = "Kernels (starts under way included) one tenant may hold; `0`: only `--max-kernels`. A token "
                 "entry's `max_sessions` gives its tenant a cap of its own. On a cluster node (`--etcd`) the "
                 "cap holds across the cluster.",
         .sample = "3",
         .set = [](auto& c, const auto& v) { c.manager.max_kernels_per_tenant = to_u64("max_kernels_per_tenant", v); }},
        {.name = "max_sessions_per_tenant", .section = heading::admission, .value = "N", .fallback = "`16`",
         .help = "The older name of `--max-kernels-per-tenant`.",
         .sample = "5",
         .set = [](auto& c, const auto& v) { c.manager.max_kernels_per_tenant = to_u64("max_sessions_per_tenant", v); }},
        {.name = "max_launches_per_tenant", .section = heading::admission, .value = "N", .fallback = "`2`",
         .help = "Sandbox starts and restarts one tenant may have on the 4 launch threads at once; more wait in "
                 "that tenant's own queue, so starts that hang cannot hold up other tenants' creates. At least 1.",
         .sample = "1",
         .set = [](auto& c, const auto& v) { c.manager.max_launches_per_tenant = at_least_1("max_launches_per_tenant", v); }},
        {.name = "max_volumes_per_tenant", .section = heading::admission, .value = "N", .fallback = "`8`",
         .help = "Named volumes (`POST /v1/volumes`) one tenant may have; `0`: no cap.",
         .sample = "4",
         .set = [](auto& c, const auto& v) { c.manager.max_volumes_per_tenant = to_u64("max_volumes_per_tenant", v); }},
        {.name = "max_volume_bytes_per_tenant", .section = heading::admission, .value = "BYTES",
         .fallback = "`34359738368` (32 GiB)",
         .help = "The sizes of one tenant's volumes together; `0`: no cap.",
         .sample = "1073741824",
         .set = [](auto& c, const auto& v) {
             c.manager.max_volume_bytes_per_tenant = to_u64("max_volume_bytes_per_tenant", v);
         }},
        {.name = "max_snapshots_per_tenant", .section = heading::admission, .value = "N", .fallback = "`16`",
         .help = "Snapshots one tenant may keep (each holds a copy of a workspace on disk; a fork's snapshot "
                 "counts too); `0`: no cap.",
         .sample = "0",
         .set = [](auto& c, const auto& v) { c.manager.max_snapshots_per_tenant = to_u64("max_snapshots_per_tenant", v); }},

        // Kernels
        {.name = "default_kernelspec", .section = heading::kernels, .value = "NAME", .fallback = "`python3`",
         .help = "The kernelspec a start that names none gets, and the one the warm pool keeps ready. When no "
                 "kernelspec has that name, the first by name is the default.",
         .sample = "python3",
         .set = [](auto& c, const auto& v) { c.default_kernelspec = v; }},
        {.name = "auto_restart", .section = heading::kernels, .value = "true|false", .fallback = "`true`",
         .help = "Restart a kernel that dies: it is reported `dead`, then `restarting`, and restarted in its "
                 "kept workspace, at most 5 times in 5 minutes. `true`, `1` or `yes` turn it on, any other "
                 "value off.",
         .sample = "false",
         .set = [](auto& c, const auto& v) { c.manager.auto_restart = yes(v); }},
        {.name = "no_auto_restart", .section = heading::kernels, .kind = cli, .fallback = "—",
         .help = "The same as `--auto-restart false`."},
        {.name = "iopub_msg_rate", .section = heading::kernels, .value = "N", .fallback = "`0` (no limit)",
         .help = "IOPub messages per second a kernel may send its clients, averaged over 3 s; past it stream "
                 "output is withheld, with a notice, until the rate drops. Plots and other rich outputs pass "
                 "unless `--rate-limit-rich-outputs`. A decimal number; `0`: no limit.",
         .sample = "100",
         .set = [](auto& c, const auto& v) { c.manager.kernel.iopub_msg_rate = to_double("iopub_msg_rate", v); }},
        {.name = "iopub_data_rate", .section = heading::kernels, .value = "BYTES", .fallback = "`0` (no limit)",
         .help = "IOPub bytes per second, as `--iopub-msg-rate`.",
         .sample = "1000000.5",
         .set = [](auto& c, const auto& v) { c.manager.kernel.iopub_data_rate = to_double("iopub_data_rate", v); }},
        {.name = "rate_limit_rich_outputs", .section = heading::kernels, .value = "true|false", .fallback = "`false`",
         .help = "Let the IOPub rate limits withhold rich outputs (plots, tables, HTML) too, not only stream "
                 "text. `true` or `1` turn it on (`yes` does not), any other value off.",
         .sample = "true",
         .set = [](auto& c, const auto& v) { c.manager.kernel.limit_rich_outputs = v == "true" || v == "1"; }},

        // Warm pool
        {.name = "pool_size", .section = heading::pool, .value = "N", .fallback = "`2`",
         .help = "Warm sandboxes kept ready for the default kernelspec; `0`: no pool. A create that finds the "
                 "pool empty waits for the next kernel to be ready, whichever start brings it, oldest first "
                 "within a tenant and the tenant with the fewest waiting first; no refill runs while creates "
                 "wait.",
         .sample = "3",
         .set = [](auto& c, const auto& v) { c.pool_size = to_u64("pool_size", v); }},
        {.name = "pool_max", .section = heading::pool, .value = "N", .fallback = "4 × `--pool-size`",
         .help = "How far misses may raise the pool: each miss raises its target by one, up to this, for "
                 "`--pool-growth-window`, so the next burst finds more ready. Not below `--pool-size`.",
         .sample = "8",
         .set = [](auto& c, const auto& v) { c.pool_max = to_u64("pool_max", v); }},
        {.name = "pool", .section = heading::pool, .value = "KERNELSPEC=N",
         .fallback = "the default kernelspec's `--pool-size`, and as many for `code-interpreter` (E2B's default "
                     "template) when the languages image is built",
         .help = "Warm sandboxes kept ready for another kernelspec (`ir`, `javascript`, `typescript`, `bash`, "
                 "`code-interpreter`, or one the config file names), claimed and refilled as the default's are; "
                 "`0` turns that kernelspec's pool off. Repeatable, one kernelspec each.",
         .sample = "ir=1",
         .set = [](auto& c, const auto& v) {
             const auto [name, n] = assignment(v, "--pool wants kernelspec=N");
             c.kernelspec_pools[name] = to_u64("pool", n);
         }},
        {.name = "pool_growth_window", .section = heading::pool, .value = "S", .fallback = "`300`",
         .help = "How long a miss keeps the target raised; once the window passes without a miss, warm kernels "
                 "above `--pool-size` are stopped. At least 1.",
         .sample = "60",
         .set = [](auto& c, const auto& v) {
             c.manager.pool_growth_window = std::chrono::seconds(at_least_1("pool_growth_window", v));
         }},
        {.name = "template_pool_idle", .section = heading::pool, .value = "S", .fallback = "`1800`",
         .help = "How long a template's warm pool (its `kernel.pool`) stays without a claim before its warm "
                 "sandboxes are stopped; its next session starts one cold and brings the pool back. Misses "
                 "raise a template's pool up to twice its size for `--pool-growth-window`. At least 1.",
         .sample = "600",
         .set = [](auto& c, const auto& v) {
             c.manager.template_pool_idle = std::chrono::seconds(at_least_1("template_pool_idle", v));
         }},
        {.name = "pool_concurrency", .section = heading::pool, .value = "N", .fallback = "`2`",
         .help = "Pool starts under way at once, and as many again for creates waiting on an empty pool: a "
                 "burst's starts run in turn, so its first members get the first kernels instead of every "
                 "start sharing the CPU and all finishing late. At least 1.",
         .sample = "4",
         .set = [](auto& c, const auto& v) { c.manager.pool_concurrency = at_least_1("pool_concurrency", v); }},
        {.name = "pool_preload", .section = heading::pool, .value = "MODULE,…", .fallback = "`numpy,pandas,matplotlib.pyplot`",
         .help = "Modules a warm kernel imports before it is claimed, comma-separated; an empty value imports "
                 "none.",
         .sample = "numpy,scipy",
         .set = [](auto& c, const auto& v) { c.manager.pool_preload = comma_list(v); }},

        // Limits (Jupyter surface): the policy book's Jupyter defaults.
        {.name = "jupyter_exec_timeout", .section = heading::jupyter_limits, .value = "S", .fallback = "`600`",
         .help = "Seconds a cell may run, from when the kernel starts it. Past it: a stderr notice under the "
                 "cell, then SIGINT (the kernel's `KeyboardInterrupt` follows); a cell still running "
                 "`--cell-interrupt-grace` later gets a `TimeoutError` error and `execute_reply` from the "
                 "gateway, and the kernel is restarted (files kept).",
         .sample = "7",
         .set = [](auto& c, const auto& v) { c.manager.policies.jupyter.exec_timeout = secs("jupyter_exec_timeout", v); }},
        {.name = "jupyter_output_limit", .section = heading::jupyter_limits, .value = "BYTES", .fallback = "`16777216` (16 MiB)",
         .help = "Bytes of stream text (stdout and stderr) per cell: the text up to the limit is shown, then a "
                 "notice; the rest is withheld and the cell keeps running.",
         .sample = "4096",
         .set = [](auto& c, const auto& v) {
             c.manager.policies.jupyter.output_limit_bytes = to_u64("jupyter_output_limit", v);
         }},
        {.name = "jupyter_result_limit", .section = heading::jupyter_limits, .value = "BYTES", .fallback = "`67108864` (64 MiB)",
         .help = "Bytes of rich outputs (plots, tables, HTML) per cell; later ones are withheld, with one notice.",
         .sample = "1048576",
         .set = [](auto& c, const auto& v) {
             c.manager.policies.jupyter.result_limit_bytes = to_u64("jupyter_result_limit", v);
         }},
        {.name = "cull_idle_timeout", .section = heading::jupyter_limits, .value = "S", .fallback = "`0` (none)",
         .help = "Seconds without activity after which a kernel is shut down.",
         .sample = "60",
         .set = [](auto& c, const auto& v) { c.manager.policies.jupyter.idle_timeout = secs("cull_idle_timeout", v); }},
        {.name = "jupyter_lifetime", .section = heading::jupyter_limits, .value = "S", .fallback = "`0` (none)",
         .help = "Seconds after its start at which a kernel is shut down.",
         .sample = "3600",
         .set = [](auto& c, const auto& v) { c.manager.policies.jupyter.lifetime = secs("jupyter_lifetime", v); }},
        {.name = "cell_interrupt_grace", .section = heading::jupyter_limits, .value = "S", .fallback = "`5`",
         .help = "How long any cell past its time limit may go on after the SIGINT that limit sent, whatever "
                 "door it came through (the kernel WebSocket, `/v1`, E2B, MCP, an E2B code context), before the "
                 "gateway answers it and restarts its kernel (or ends the context's interpreter). At least 1.",
         .sample = "2",
         .set = [](auto& c, const auto& v) {
             c.manager.cell_interrupt_grace = std::chrono::seconds(at_least_1("cell_interrupt_grace", v));
         }},

        // Limits (/v1 surface): the agent surface's defaults and what a request may ask for.
        {.name = "exec_timeout", .section = heading::agent_limits, .value = "S", .fallback = "`300`",
         .help = "Seconds a cell may run, from when the kernel starts it; a request's `timeout_s` may ask for "
                 "up to `--max-exec-timeout`.",
         .sample = "9",
         .set = [](auto& c, const auto& v) { c.agent.defaults.exec_timeout = secs("exec_timeout", v); }},
        {.name = "max_exec_timeout", .section = heading::agent_limits, .value = "S", .fallback = "`3600`",
         .help = "The longest `timeout_s` a request may ask for.",
         .sample = "7200",
         .set = [](auto& c, const auto& v) { c.agent.maxima.exec_timeout = secs("max_exec_timeout", v); }},
        {.name = "idle_timeout", .section = heading::agent_limits, .value = "S", .fallback = "`600`",
         .help = "Seconds without activity after which a session is deleted, or paused when its `lifecycle` "
                 "says `\"on_idle\": \"pause\"`.",
         .sample = "120",
         .set = [](auto& c, const auto& v) { c.agent.defaults.idle_timeout = secs("idle_timeout", v); }},
        {.name = "max_idle_timeout", .section = heading::agent_limits, .value = "S", .fallback = "`86400`",
         .help = "The longest `idle_timeout_s` a request may ask for.",
         .sample = "3600",
         .set = [](auto& c, const auto& v) { c.agent.maxima.idle_timeout = secs("max_idle_timeout", v); }},
        {.name = "lifetime", .section = heading::agent_limits, .value = "S", .fallback = "`86400`",
         .help = "Seconds after its start at which a session is deleted.",
         .sample = "3600",
         .set = [](auto& c, const auto& v) { c.agent.defaults.lifetime = secs("lifetime", v); }},
        {.name = "max_lifetime", .section = heading::agent_limits, .value = "S", .fallback = "`604800` (7 days)",
         .help = "The longest `lifetime_s` a request may ask for, and the longest `timeout` of an E2B sandbox.",
         .sample = "86400",
         .set = [](auto& c, const auto& v) { c.agent.maxima.lifetime = secs("max_lifetime", v); }},
        {.name = "output_limit", .section = heading::agent_limits, .value = "BYTES", .fallback = "`1048576` (1 MiB)",
         .help = "Bytes of stream text per cell: the text up to the limit is shown, then a notice; the rest is "
                 "withheld and the cell keeps running. A request's `output_limit_bytes` may ask for up to "
                 "`--max-output-limit`.",
         .sample = "65536",
         .set = [](auto& c, const auto& v) { c.agent.defaults.output_limit_bytes = to_u64("output_limit", v); }},
        {.name = "max_output_limit", .section = heading::agent_limits, .value = "BYTES", .fallback = "`67108864` (64 MiB)",
         .help = "The largest `output_limit_bytes` a request may ask for.",
         .sample = "16777216",
         .set = [](auto& c, const auto& v) { c.agent.maxima.output_limit_bytes = to_u64("max_output_limit", v); }},
        {.name = "result_limit", .section = heading::agent_limits, .value = "BYTES", .fallback = "`33554432` (32 MiB)",
         .help = "Bytes of rich outputs (plots, tables, HTML) per cell; later ones are withheld, with one notice.",
         .sample = "1048576",
         .set = [](auto& c, const auto& v) { c.agent.defaults.result_limit_bytes = to_u64("result_limit", v); }},
        {.name = "upload_limit", .section = heading::agent_limits, .value = "BYTES", .fallback = "`268435456` (256 MiB)",
         .help = "Bytes per file written into a session through `/v1` (and through E2B, MCP and a workspace "
                 "archive); a larger one gets `413`.",
         .sample = "1048576",
         .set = [](auto& c, const auto& v) { c.agent.defaults.upload_limit_bytes = to_u64("upload_limit", v); }},

        // Egress
        {.name = "egress", .section = heading::egress, .value = "true|false", .fallback = "`true`",
         .help = "Whether sessions may have a network at all. `true`, `1` or `yes` allow it; any other value "
                 "(`false`, `off`, `no`) means no session may have one, and neither the proxy nor its CA is made.",
         .sample = "false",
         .set = [](auto& c, const auto& v) { c.egress = yes(v); }},
        {.name = "egress_root", .section = heading::egress, .value = "DIR", .fallback = "`<state-dir>/egress`",
         .help = "Where the proxy's per-session sockets live: a networked session gets `<root>/<session>/`, "
                 "mounted read-only at `/run/egress` in its sandbox. Give `cellgate-launchd` the same "
                 "`--egress-root` (it has no default: without one, no sandbox it starts may have a network).",
         .sample = "/tmp/egress",
         .set = [](auto& c, const auto& v) { c.launcher.egress_root = v; }},
        {.name = "egress_resolve", .section = heading::egress, .value = "NAME=ADDR[:PORT]", .fallback = "none",
         .help = "Send the proxy's connections to NAME to this address instead of resolving it (as curl's "
                 "`--resolve`; without a port, the port asked for), for tests and air-gapped mirrors; the "
                 "operator named it, so an internal address is allowed. Repeatable; in the config file a "
                 "string or an array of strings.",
         .sample = "pypi.internal=10.1.2.3:443",
         .set = [](auto& c, const auto& v) {
             try {
                 c.egress_proxy.resolve.insert_or_assign(egress::parse_resolve_entry(v).first, egress::parse_resolve_entry(v).second);
             } catch (const std::invalid_argument& e) {
                 throw config_error(e.what());
             }
         }},
        {.name = "egress_allow_internal", .section = heading::egress, .value = "CIDR", .fallback = "none",
         .help = "A network the proxy may dial although it is internal (loopback, link-local, private, CGNAT, "
                 "ULA and the like are refused by default, against DNS rebinding). A session's own CIDR entry "
                 "never opens an internal network. Repeatable; in the config file a string or an array of "
                 "strings.",
         .sample = "10.1.2.0/24",
         .set = [](auto& c, const auto& v) {
             try {
                 const auto r = egress::parse_rule(v);
                 if (r.what != egress::rule::kind::network) throw std::invalid_argument("not a network");
                 c.egress_proxy.internal_allowed.push_back(r.net);
             } catch (const std::invalid_argument&) {
                 throw config_error("--egress-allow-internal wants a CIDR such as 10.1.2.0/24, not '" + v + "'");
             }
         }},
        {.name = "egress_dns_threads", .section = heading::egress, .value = "N", .fallback = "`8`",
         .help = "Threads the egress proxy looks names up on (its own, made as needed; the cluster hop's "
                 "resolver is not among them). A lookup whose answer takes longer than "
                 "[`egress_dns_timeout`](#egress_dns_timeout) is abandoned and its thread replaced, up to 64 "
                 "threads waiting on abandoned lookups. Addresses are never looked up. `/metrics`: "
                 "`cellgate_egress_dns_*`.",
         .sample = "4",
         .set = [](auto& c, const auto& v) { c.egress_proxy.dns.threads = at_least_1("egress_dns_threads", v); }},
        {.name = "egress_dns_timeout", .section = heading::egress, .value = "SECONDS", .fallback = "`5`",
         .help = "How long the proxy waits for a name's addresses; past it the connection gets `403` (cannot "
                 "resolve). Fractions allowed; at least 0.1.",
         .sample = "2.5",
         .set = [](auto& c, const auto& v) {
             c.egress_proxy.dns.timeout = std::chrono::milliseconds(
                 static_cast<std::int64_t>(std::max(0.1, to_double("egress_dns_timeout", v)) * 1000));
         }},
        {.name = "egress_dns_per_session", .section = heading::egress, .value = "N", .fallback = "`4`",
         .help = "Name lookups one session may have in flight (an abandoned one counts until it really ends); "
                 "one more gets `503` from the proxy at once.",
         .sample = "2",
         .set = [](auto& c, const auto& v) {
             c.egress_proxy.dns.per_session = at_least_1("egress_dns_per_session", v);
         }},
        {.name = "egress_dns_per_tenant", .section = heading::egress, .value = "N", .fallback = "`6`",
         .help = "Name lookups all of one tenant's sessions may have in flight, as "
                 "[`egress_dns_per_session`](#egress_dns_per_session). Below "
                 "[`egress_dns_threads`](#egress_dns_threads), one tenant never holds every thread.",
         .sample = "4",
         .set = [](auto& c, const auto& v) { c.egress_proxy.dns.per_tenant = at_least_1("egress_dns_per_tenant", v); }},
        {.name = "egress_accept_rate", .section = heading::egress, .value = "PER_SECOND", .fallback = "`50`",
         .help = "Connections one session may open to the egress proxy per second (bursts of twice that). "
                 "Past it one connection is answered `429` at once and the session's socket is not accepted "
                 "from again until it may have another, so a connect flood costs the gateway little; those "
                 "refusals are counted (`cellgate_egress_rate_limited_total`), not logged one by one.",
         .sample = "20",
         .set = [](auto& c, const auto& v) {
             c.egress_proxy.accept_rate = std::max(0.1, to_double("egress_accept_rate", v));
         }},
        {.name = "egress_log_queue", .section = heading::egress, .value = "N", .fallback = "`10000`",
         .help = "Egress audit records waiting to be written to the state database, at most: a thread of "
                 "their own writes them in batches. Past it a record is kept in the session's in-memory log "
                 "only, and counted (`cellgate_egress_log_records_total{outcome=\"dropped\"}`).",
         .sample = "1000",
         .set = [](auto& c, const auto& v) { c.network.log_queue = at_least_1("egress_log_queue", v); }},
        {.name = "egress_tls_intercept", .section = heading::egress, .value = "credentials|all|off",
         .fallback = "`credentials`",
         .help = "Which TLS tunnels the proxy terminates, with the gateway's own CA (made at the first start, "
                 "`<state-dir>/egress-ca/`, and trusted inside the sandboxes): `credentials`, those to a host "
                 "it adds a credential to; `all`, every CONNECT, so that the `Host` of every HTTPS request is "
                 "checked too (client certificates and pinning then fail); `off`, none, and no credential goes "
                 "over HTTPS.",
         .sample = "all",
         .set = [](auto& c, const auto& v) {
             if (v != "credentials" && v != "all" && v != "off")
                 throw config_error("--egress-tls-intercept is credentials, all or off, not '" + v + "'");
             c.egress_tls_intercept = v;
         }},
        {.name = "egress_upstream_ca", .section = heading::egress, .value = "FILE", .fallback = "none (the system's roots only)",
         .help = "A PEM file of roots the proxy trusts upstream beside the system's (an internal mirror's CA). "
                 "Repeatable; in the config file a string or an array of strings.",
         .sample = "/etc/ssl/internal-ca.pem",
         .set = [](auto& c, const auto& v) { c.egress_proxy.upstream_ca_files.push_back(v); }},
        {.name = "egress_pip_index_url", .section = heading::egress, .value = "URL", .fallback = "none (pip's own: PyPI)",
         .help = "The index pip uses in sandboxes with a network: a `pip.conf` naming it goes into each "
                 "networked sandbox's `/run/egress/` (`PIP_CONFIG_FILE`). An `http://` or `https://` URL.",
         .sample = "https://pypi.internal/simple/",
         .set = [](auto& c, const auto& v) { c.network.pip_index_url = http_url("--egress-pip-index-url", v); }},
        {.name = "egress_preset", .section = heading::egress, .value = "NAME=ENTRY,…",
         .fallback = "`python-packages=pypi.org,files.pythonhosted.org`",
         .help = "A named allow list that a session's network may ask for by name (`\"preset\": "
                 "\"python-packages\"`); naming `python-packages` points that one at a mirror. Repeatable, one "
                 "preset each; in the config file also [`egress_presets`](#egress_presets).",
         .sample = "python-packages=pypi.internal",
         .set = [](auto& c, const auto& v) {
             const auto [name, entries] = assignment(v, "--egress-preset wants name=entry,entry");
             c.network.presets[name] = comma_list(entries);
         }},

        // Cluster
        {.name = "node_tag", .section = heading::cluster, .value = "HEX8", .fallback = "none (plain random ids)",
         .help = "This node's tag, 8 lowercase hex digits: the first group of every id it makes (kernels, "
                 "Jupyter and `/v1` sessions, snapshots), so that a router sends a request carrying an id to "
                 "its owner; ids stay UUID-shaped. `/metrics`: `cellgate_node_info{tag}`.",
         .sample = "0a1b2c3d",
         .set = [](auto& c, const auto& v) { c.node_tag = v; }},
        {.name = "etcd", .section = heading::cluster, .value = "URL,…", .fallback = "none (a node on its own)",
         .help = "The etcd members (`https://host:port,…`) of the cluster this node joins; needs `--node-tag`, "
                 "`--etcd-ca`, `--etcd-cert`, `--etcd-key` and `--cluster-secret-file` (etcd is reached only over "
                 "TLS with a client certificate, and peers' requests are signed: docs/cluster.md). "
                 "The node keeps its record (`/cellgate/nodes/<tag>`) on a lease, refreshed every third of "
                 "`--lease-ttl`; without an answer from etcd for two thirds of the TTL it admits no new "
                 "session (`503`) while open ones keep working. Tenants' caps then hold across the cluster, "
                 "and lists (`GET /api/kernels`, `/api/sessions`, `/v1/sessions`, …) span it.",
         .sample = "https://127.0.0.1:2379,https://127.0.0.2:2379",
         .set = [](auto& c, const auto& v) { c.etcd = v; }},
        {.name = "etcd_ca", .section = heading::cluster, .value = "FILE", .fallback = "none (required with `--etcd`)",
         .help = "The CA (PEM) that signed the etcd members' certificates; a member whose certificate does not "
                 "chain to it, or does not name the host of its `--etcd` URL, is not spoken to.",
         .sample = "/etc/cellgate/etcd/ca.pem",
         .set = [](auto& c, const auto& v) { c.etcd_ca = v; }},
        {.name = "etcd_cert", .section = heading::cluster, .value = "FILE", .fallback = "none (required with `--etcd`)",
         .help = "This node's client certificate (PEM) for etcd, which runs with `--client-cert-auth`. A node "
                 "etcd refuses says so in its log (`TLS: …`) and `/metrics` (`cellgate_cluster_admitting 0`), and "
                 "admits no new session; open ones keep working.",
         .sample = "/etc/cellgate/etcd/node.pem",
         .set = [](auto& c, const auto& v) { c.etcd_cert = v; }},
        {.name = "etcd_key", .section = heading::cluster, .value = "FILE", .fallback = "none (required with `--etcd`)",
         .help = "The key of `--etcd-cert` (PEM).",
         .sample = "/etc/cellgate/etcd/node-key.pem",
         .set = [](auto& c, const auto& v) { c.etcd_key = v; }},
        {.name = "cluster_secret_file", .section = heading::cluster, .value = "FILE",
         .fallback = "none (required with `--etcd`)",
         .help = "The secret every node of the cluster shares: 32 to 4096 bytes (`openssl rand -hex 32`), in a "
                 "file its owner alone may read (mode 600 or 400; else the node does not start). Nodes sign "
                 "their etcd records with it (a record without a good signature is no peer), and every request "
                 "they make of each other (HMAC-SHA256 bound to the receiving node, the method, the target and "
                 "a 30 s window, each signature taken once). A node sends a peer no tenant's token: it vouches "
                 "for the tenant under its signature. A node whose secret is not the cluster's does not join.",
         .sample = "/etc/cellgate/cluster-secret",
         .set = [](auto& c, const auto& v) { c.cluster_secret_file = v; }},
        {.name = "node_address", .section = heading::cluster, .value = "HOST:PORT", .fallback = "`--ip` and the port bound",
         .help = "The address peers and the router reach this node at, as its etcd record gives it.",
         .sample = "10.0.0.5:8888",
         .set = [](auto& c, const auto& v) { c.node_address = v; }},
        {.name = "lease_ttl", .section = heading::cluster, .value = "S", .fallback = "`10`",
         .help = "The TTL of the node's etcd lease, 2…300 (checked when `--etcd` is given). A SIGKILLed node's "
                 "record and quota places go when it expires; a stopped node's at once.",
         .sample = "30",
         .set = [](auto& c, const auto& v) { c.lease_ttl = to_u64("lease_ttl", v); }},

        // Protocol and connections
        {.name = "max_body_bytes", .section = heading::connections, .value = "BYTES", .fallback = "`268435456` (256 MiB)",
         .help = "Request bodies read into memory, once the token is checked; routes that need no token take "
                 "64 KiB.",
         .sample = "1048576",
         .set = [](auto& c, const auto& v) { c.server.max_body_bytes = to_u64("max_body_bytes", v); }},
        {.name = "max_websockets_per_tenant", .section = heading::connections, .value = "N", .fallback = "`256`",
         .help = "WebSockets (kernel channels, terminals) one tenant may have open at once; past it an upgrade "
                 "gets `429`. `/metrics`: `cellgate_ws_tenant_refusals_total`.",
         .sample = "64",
         .set = [](auto& c, const auto& v) { c.server.max_websockets_per_tenant = to_u64("max_websockets_per_tenant", v); }},
        {.name = "trusted_proxy", .section = heading::connections, .value = "ADDRESS", .fallback = "none",
         .help = "An address (exactly as the socket reports it, e.g. `10.0.0.5`) of a router or peer node whose "
                 "connections count only against `max_connections`, not the 512 per address, since they carry "
                 "many clients. Repeatable. Each tenant's WebSockets are capped instead "
                 "(`max_websockets_per_tenant`).",
         .sample = "10.0.0.5",
         .set = [](auto& c, const auto& v) { c.server.trusted_proxies.push_back(v); }},
        {.name = "max_auth_failures", .section = heading::connections, .value = "N", .fallback = "`20`",
         .help = "Failed authentications (a wrong or missing token) one client address may make in a row; "
                 "one more is forgiven each second, and past them its requests get `429` with `Retry-After` "
                 "before any token is looked at. Behind a `trusted_proxy`, the address its "
                 "`X-Forwarded-For` names last. At least 1. `/metrics`: `cellgate_auth_throttled_total`.",
         .sample = "10",
         .set = [](auto& c, const auto& v) { c.server.max_auth_failures = at_least_1("max_auth_failures", v); }},
        {.name = "max_ws_message_bytes", .section = heading::connections, .value = "BYTES", .fallback = "`67108864` (64 MiB)",
         .help = "A larger message from a WebSocket client closes the socket with 1009.",
         .sample = "1048576",
         .set = [](auto& c, const auto& v) { c.server.max_ws_message_bytes = to_u64("max_ws_message_bytes", v); }},
        {.name = "max_terminal_message_bytes", .section = heading::connections, .value = "BYTES", .fallback = "`1048576` (1 MiB)",
         .help = "A larger message from a terminal's WebSocket client (terminado's `[\"stdin\", …]`, "
                 "`[\"set_size\", …]`) closes the socket with 1009.",
         .sample = "65536",
         .set = [](auto& c, const auto& v) { c.server.max_socket_message_bytes = to_u64("max_terminal_message_bytes", v); }},
        {.name = "max_ws_queue_bytes", .section = heading::connections, .value = "BYTES", .fallback = "`67108864` (64 MiB)",
         .help = "Kernel messages that may wait behind the frame in flight to a slow WebSocket client. Past it "
                 "the connection is closed with 1013 (try again later) and the unsent messages go back into "
                 "the session's buffer: a client that reconnects with the same `session_id` gets them in order.",
         .sample = "1048576",
         .set = [](auto& c, const auto& v) { c.server.max_ws_queue_bytes = to_u64("max_ws_queue_bytes", v); }},
        {.name = "max_sse_queue_bytes", .section = heading::connections, .value = "BYTES", .fallback = "`16777216` (16 MiB)",
         .help = "An event stream whose client falls this far behind is ended with `event: stream_error` and "
                 "its cell interrupted.",
         .sample = "1048576",
         .set = [](auto& c, const auto& v) { c.server.max_sse_queue_bytes = to_u64("max_sse_queue_bytes", v); }},
        {.name = "max_connections", .section = heading::connections, .value = "N", .fallback = "`4096`",
         .help = "Client connections (HTTP and WebSocket) open at once; past it a new one gets `503` and is "
                 "closed. At least 1.",
         .sample = "100",
         .set = [](auto& c, const auto& v) { c.server.max_connections = at_least_1("max_connections", v); }},
        {.name = "max_connections_per_address", .section = heading::connections, .value = "N", .fallback = "`512`",
         .help = "Client connections open at once from one address; past it a new one gets `503` and is "
                 "closed. At least 1.",
         .sample = "10",
         .set = [](auto& c, const auto& v) {
             c.server.max_connections_per_address = at_least_1("max_connections_per_address", v);
         }},

        // Threads and logging
        {.name = "io_threads", .section = heading::threads, .value = "N", .fallback = "`0` (one per core, at least 2)",
         .help = "Threads serving connections.",
         .sample = "4",
         .set = [](auto& c, const auto& v) { c.io_threads = static_cast<int>(to_u64("io_threads", v)); }},
        {.name = "file_io_threads", .section = heading::threads, .value = "N", .fallback = "`4`",
         .help = "Threads for file-system work (contents, `/v1` files, snapshots), apart from those serving "
                 "connections. At least 1.",
         .sample = "8",
         .set = [](auto& c, const auto& v) { c.file_io.threads = at_least_1("file_io_threads", v); }},
        {.name = "file_io_per_tenant", .section = heading::threads, .value = "N", .fallback = "`2`",
         .help = "File jobs one tenant may have running at once on those threads; more wait (64 per tenant, "
                 "1,024 in all), and past that a request gets `429` with `Retry-After` (`503` when the whole "
                 "pool is full). At least 1.",
         .sample = "1",
         .set = [](auto& c, const auto& v) { c.file_io.per_tenant_running = at_least_1("file_io_per_tenant", v); }},
        {.name = "max_upload_staging_per_tenant", .section = heading::threads, .value = "BYTES",
         .fallback = "`1073741824` (1 GiB)",
         .help = "Disk one tenant's archive uploads (`PUT …/workspace`, `POST /v1/sessions` with a tar or a form) "
                 "may reserve at once while they are received: each reserves its upload limit (256 MiB by "
                 "default) until it is done; past the budget an upload gets `429`. At least 1 MiB; keep it at "
                 "least the largest upload limit. `/metrics`: `cellgate_upload_staging_bytes`.",
         .sample = "536870912",
         .set = [](auto& c, const auto& v) {
             c.upload_staging_per_tenant = to_u64("max_upload_staging_per_tenant", v);
             if (c.upload_staging_per_tenant < (1u << 20))
                 throw config_error("max_upload_staging_per_tenant must be at least 1048576 (1 MiB)");
         }},
        {.name = "max_process_starts_per_tenant", .section = heading::threads, .value = "N", .fallback = "`2`",
         .help = "Process starts (commands, terminals, E2B processes and code contexts) one tenant may have "
                 "running at once, on 4 threads of their own; 32 more wait per tenant, and past that a start "
                 "gets `429` (`503` when 1,024 wait in all). `/metrics`: `cellgate_process_starts_waiting`, "
                 "`cellgate_process_starts_refused_total{why}`. At least 1.",
         .sample = "1",
         .set = [](auto& c, const auto& v) {
             c.processes.starts_per_tenant = at_least_1("max_process_starts_per_tenant", v);
         }},
        {.name = "log_level", .section = heading::threads, .value = "LEVEL", .fallback = "`info`",
         .help = "How much the gateway logs: `trace`, `debug`, `info`, `warning` (or `warn`), `error` (or "
                 "`err`), `critical` or `off`. Any other name turns logging off.",
         .sample = "debug",
         .set = [](auto& c, const auto& v) { c.log_level = v; }},

        // Surfaces
        {.name = "e2b_domain", .section = heading::surfaces, .value = "DOMAIN", .fallback = "none",
         .help = "A domain with wildcard DNS and TLS for the E2B surface: sandboxes report it as their `domain` "
                 "and are also reached as `https://<port>-<id>.<domain>`, so that E2B's SDKs need no "
                 "`E2B_SANDBOX_URL` ([e2b.md](e2b.md)).",
         .sample = "sandbox.example.com",
         .set = [](auto& c, const auto& v) { c.e2b.domain = v; }},
        {.name = "max_watches_per_tenant", .section = heading::surfaces, .value = "N", .fallback = "`16`",
         .help = "Directory watches (E2B `WatchDir`, `CreateWatcher`) one tenant's sandboxes may hold at once, "
                 "besides 8 per sandbox and 64 in all; past it `429`. `/metrics`: `cellgate_e2b_watches`, "
                 "`cellgate_e2b_watch_tenants_at_cap`.",
         .sample = "4",
         .set = [](auto& c, const auto& v) {
             c.e2b.max_watches_per_tenant = to_u64("max_watches_per_tenant", v);
             if (c.e2b.max_watches_per_tenant == 0) throw config_error("max_watches_per_tenant must be 1 or more");
         }},
        {.name = "template_build_allow", .section = heading::surfaces, .value = "ENTRY,…",
         .fallback = "none (build steps reach no network)",
         .help = "Where a template's build steps may connect, through the egress proxy (entries as a session's "
                 "`network.allow` takes them: hosts, `*.` wildcards, networks, ports): the package indexes and "
                 "mirrors its RUN steps fetch from. Repeatable, or comma-separated. Needs `egress` on. Steps run "
                 "with `HTTP(S)_PROXY` set and `--egress-pip-index-url` as pip's index ([templates.md](templates.md)).",
         .sample = "pypi.org,files.pythonhosted.org",
         .set = [](auto& c, const auto& v) {
             for (auto& e : comma_list(v)) c.templates.build_allow.push_back(e);
         }},
        {.name = "template_registries", .section = heading::surfaces, .value = "[http://]HOST[:PORT],…",
         .fallback = "none (a template's base is a built-in image or another template)",
         .help = "The registries a template may take a base image from (`from: {\"oci\": \"host/repo:tag\"}`, a "
                 "Dockerfile's `FROM host/repo:tag`, E2B's `fromImage`): pulled once per tenant and reference with "
                 "`skopeo`, unpacked with `umoci`. `http://` marks a plain-HTTP registry (a mirror inside the "
                 "operator's network); any other is reached over TLS, verified. Repeatable, or comma-separated.",
         .sample = "registry.example.internal,http://127.0.0.1:5000",
         .set = [](auto& c, const auto& v) {
             for (auto& e : comma_list(v)) {
                 const auto host = e.substr(e.find("://") == std::string::npos ? 0 : e.find("://") + 3);
                 if (host.empty() || host.find('/') != std::string::npos || (e.find("://") != std::string::npos &&
                                                                            !e.starts_with("http://") && !e.starts_with("https://")))
                     throw config_error("template_registries entries are [http://|https://]host[:port], not '" + e + "'");
                 c.templates.registries.push_back(e);
             }
         }},
        {.name = "template_apt_sources", .section = heading::surfaces, .value = "LINE",
         .fallback = "none (a base's own `/etc/apt` sources)",
         .help = "A `sources.list` line a template's build steps give apt in place of their base's own sources "
                 "(the operator's Debian mirror, e.g. one inside its network): steps run with `APT_CONFIG` "
                 "naming it, so `apt-get update` and E2B's `aptInstall` fetch from there, through the egress "
                 "proxy (name its host in `template_build_allow`). Repeatable, one line each.",
         .sample = "deb http://deb.example.internal/debian bookworm main",
         .set = [](auto& c, const auto& v) {
             if (v.empty() || v.size() > 1024 || v.find('\n') != std::string::npos || !v.starts_with("deb "))
                 throw config_error("template_apt_sources is one 'deb …' line of at most 1024 bytes");
             c.templates.apt_sources.push_back(v);
         }},
        {.name = "template_npm_registry", .section = heading::surfaces, .value = "URL",
         .fallback = "none (npm's own: registry.npmjs.org)",
         .help = "The npm registry a template's build steps use (`NPM_CONFIG_REGISTRY`, and `--registry` in "
                 "`packages: {\"npm\": […]}`), through the egress proxy (name its host in "
                 "`template_build_allow`). An `http://` or `https://` URL.",
         .sample = "https://npm.example.internal/",
         .set = [](auto& c, const auto& v) { c.templates.build.npm_registry_url = http_url("--template-npm-registry", v); }},
        {.name = "piston_anonymous_tenant", .section = heading::surfaces, .value = "NAME",
         .fallback = "none (Piston's routes need a token)",
         .help = "Opens Piston's `/api/v2` to requests without a token, as tenant NAME (its quotas, network "
                 "policy and run queue apply): Piston's clients send no credentials. A request with a token "
                 "is still its token's tenant ([piston.md](piston.md)).",
         .sample = "piston",
         .set = [](auto& c, const auto& v) { c.piston.anonymous_tenant = v; }},
        {.name = "piston_run_timeout", .section = heading::surfaces, .value = "MS", .fallback = "`3000`",
         .help = "Piston's run stage: the wall time and CPU time a job gets when it asks for none, and the most "
                 "it may ask for (`run_timeout`, `run_cpu_time`). At least 1.",
         .sample = "10000",
         .set = [](auto& c, const auto& v) {
             c.piston.run.wall = c.piston.run.cpu = std::chrono::milliseconds(at_least_1("piston_run_timeout", v));
         }},
        {.name = "piston_compile_timeout", .section = heading::surfaces, .value = "MS", .fallback = "`10000`",
         .help = "Piston's compile stage, as `--piston-run-timeout` for the run stage. At least 1.",
         .sample = "30000",
         .set = [](auto& c, const auto& v) {
             c.piston.compile.wall = c.piston.compile.cpu = std::chrono::milliseconds(at_least_1("piston_compile_timeout", v));
         }},
        {.name = "piston_output_max_size", .section = heading::surfaces, .value = "BYTES", .fallback = "`65536`",
         .help = "How much of each of a stage's stdout and stderr a one-shot run keeps; past it the program is "
                 "killed and its status is `OL` (stdout) or `EL` (stderr), as Piston's `output_max_size` (whose "
                 "1024 is too little for most programs' output). At least 1.",
         .sample = "1024",
         .set = [](auto& c, const auto& v) {
             c.piston.run.output = c.piston.compile.output = at_least_1("piston_output_max_size", v);
         }},
        {.name = "max_runs_per_tenant", .section = heading::surfaces, .value = "N", .fallback = "`8`",
         .help = "One-shot runs (Piston's jobs, `/v1/execute` with a `language`) one tenant has under way at "
                 "once; more wait in its queue, in order. At least 1.",
         .sample = "16",
         .set = [](auto& c, const auto& v) { c.runs.running_per_tenant = at_least_1("max_runs_per_tenant", v); }},
        {.name = "max_queued_runs_per_tenant", .section = heading::surfaces, .value = "N", .fallback = "`256`",
         .help = "One-shot runs one tenant may have waiting; past it `429` with `Retry-After`.",
         .sample = "1000",
         .set = [](auto& c, const auto& v) { c.runs.queued_per_tenant = to_u64("max_queued_runs_per_tenant", v); }},
        {.name = "runtime_pool", .section = heading::pool, .value = "N", .fallback = "`2`",
         .help = "Warm sandboxes kept for the built-in one-shot runtimes (the languages image's), from the "
                 "first job on; each job claims one and ends it. `0`: none (each job starts one).",
         .sample = "4",
         .set = [](auto& c, const auto& v) { c.runtime_pool = to_u64("runtime_pool", v); }},
        {.name = "max_templates_per_tenant", .section = heading::surfaces, .value = "N", .fallback = "`32`",
         .help = "Templates one tenant may keep; a build of one more gets `429`. At least 1.",
         .sample = "8",
         .set = [](auto& c, const auto& v) { c.templates.max_templates_per_tenant = at_least_1("max_templates_per_tenant", v); }},
        {.name = "max_template_bytes_per_tenant", .section = heading::surfaces, .value = "BYTES",
         .fallback = "`17179869184` (16 GiB)",
         .help = "What one tenant's template layers may hold on disk. A build submitted at the cap gets `413`; "
                 "a build that passes it fails at the step that did, saying so. At least 1 MiB.",
         .sample = "4294967296",
         .set = [](auto& c, const auto& v) {
             c.templates.max_layer_bytes_per_tenant = to_u64("max_template_bytes_per_tenant", v);
             if (c.templates.max_layer_bytes_per_tenant < (1u << 20))
                 throw config_error("max_template_bytes_per_tenant must be at least 1048576 (1 MiB)");
         }},
        {.name = "max_template_pool_per_tenant", .section = heading::surfaces, .value = "N", .fallback = "`4`",
         .help = "Warm sandboxes one tenant's templates may keep together (each template's `kernel.pool`, 0 to "
                 "4); a build that would pass it gets `429`. 0 turns templates' pools off.",
         .sample = "2",
         .set = [](auto& c, const auto& v) { c.templates.max_pool_per_tenant = to_u64("max_template_pool_per_tenant", v); }},
        {.name = "template_step_disk", .section = heading::surfaces, .value = "BYTES",
         .fallback = "`8589934592` (8 GiB)",
         .help = "What one RUN step of a template's build may write: its own file system of this size (or of "
                 "the tenant's room left under `max_template_bytes_per_tenant`, if less; 64 MiB at least), past "
                 "which the step gets ENOSPC and fails. 64 MiB to the largest workspace a session may have.",
         .sample = "2147483648",
         .set = [](auto& c, const auto& v) {
             c.templates.step_disk_bytes = to_u64("template_step_disk", v);
             if (c.templates.step_disk_bytes < (64u << 20))
                 throw config_error("template_step_disk must be at least 67108864 (64 MiB)");
         }},
        {.name = "template_builds", .section = heading::surfaces, .value = "N", .fallback = "`2`",
         .help = "Template builds running at once on this gateway, one per tenant; 4 more wait per tenant (64 "
                 "in all), and past that a build gets `429`. At least 1.",
         .sample = "1",
         .set = [](auto& c, const auto& v) { c.templates.build_threads = at_least_1("template_builds", v); }},
        {.name = "template_step_timeout", .section = heading::surfaces, .value = "SECONDS", .fallback = "`900`",
         .help = "How long one RUN step of a template's build may run before it is stopped and the build fails "
                 "at it. 1 to 86400.",
         .sample = "300",
         .set = [](auto& c, const auto& v) {
             const auto s = to_u64("template_step_timeout", v);
             if (s < 1 || s > 86400) throw config_error("template_step_timeout is 1 to 86400 seconds");
             c.templates.step_timeout = std::chrono::seconds(s);
         }},
        {.name = "static_dir", .section = heading::surfaces, .value = "DIR", .fallback = "none (the copies compiled in)",
         .help = "Serve the chat page and the JavaScript client from this directory's `web/` and `js/` (the "
                 "repository's `clients/`) instead of the copies compiled into the binary; for development.",
         .sample = "/tmp/clients",
         .set = [](auto& c, const auto& v) { c.static_dir = v; }},
        {.name = "output_scripts", .section = heading::surfaces, .value = "true|false", .fallback = "`false`",
         .help = "Let HTML outputs in the chat page run scripts, in sandboxed frames without same-origin (the "
                 "page's Content-Security-Policy then allows inline script). `true`, `1` or `yes` turn it on, "
                 "any other value off.",
         .sample = "true",
         .set = [](auto& c, const auto& v) { c.output_scripts = yes(v); }},
    };
}

}  // namespace cellgate::config
