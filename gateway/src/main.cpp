// cellgate: the gateway. Wires the pieces together and runs the shutdown ladder.
#include "agent/agent_service.hpp"
#include "e2b/e2b_api.hpp"
#include "mcp/mcp_api.hpp"
#include "piston/piston_api.hpp"
#include "processes/process_table.hpp"
#include "core/runs.hpp"
#include "core/runtimes.hpp"
#include "jupyter/jupyter_api.hpp"
#include "kit/services.hpp"
#include "v1/v1_api.hpp"
#include "web/web_api.hpp"
#include "core/network.hpp"
#include "core/sessions.hpp"
#include "egress/proxy.hpp"
#include "cellgate/launcher/launcher.hpp"
#include "cellgate/launcher/service.hpp"
#include "config/gateway_config.hpp"
#include "http/handoffs.hpp"
#include "http/listener.hpp"
#include "cluster/membership.hpp"
#include "kernels/kernel_manager.hpp"
#include "kernels/kernelspecs.hpp"
#include "kernels/node_id.hpp"
#include "kernels/session_registry.hpp"
#include "kernels/state_store.hpp"
#include "metrics/metrics.hpp"
#include "util/cluster_secret.hpp"
#include "util/http_client.hpp"
#include "wire/zmq_reactor.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

namespace asio = boost::asio;
using namespace cellgate;

namespace {

std::shared_ptr<asio::ssl::context> make_tls(const config::gateway_config& c) {
    if (!c.certfile) return nullptr;
    auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
    tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    tls->use_certificate_chain_file(*c.certfile);
    tls->use_private_key_file(*c.keyfile, asio::ssl::context::pem);
    return tls;
}

// Sandboxes left by an earlier gateway process that no kept session owns.
void remove_leftovers(launcher::sandbox_launcher& l, const std::set<std::string>& keep) {
    for (const auto& s : l.list()) {
        if (keep.count(s.id) != 0) continue;
        try {
            l.remove(s.id);
            spdlog::info("removed sandbox {} left by an earlier run", s.id);
        } catch (const std::exception& e) {
            spdlog::warn("could not remove leftover sandbox {}: {}", s.id, e.what());
        }
    }
    l.reap_orphans(keep);
}

// Output spools of sessions this run did not take back.
void remove_spools_of_others(const std::filesystem::path& root, const std::set<std::string>& keep) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root, ec))
        if (keep.count(e.path().filename().string()) == 0) std::filesystem::remove_all(e.path(), ec);
}

struct recovered {
    std::vector<std::pair<kernels::persisted_kernel, std::optional<launcher::sandbox_info>>> kernels;
    std::set<std::string> ids;
};

// Decides, from the state database, which kernels of an earlier (crashed or
// killed) gateway process to take back: those whose kernelspec still exists
// and whose lifetime and idle limits did not run out while it was down.
// The rest are forgotten here and their sandboxes removed with the leftovers.
recovered recover(kernels::state_store& store, launcher::sandbox_launcher& l, const kernels::kernelspec_registry& specs) {
    recovered out;
    const auto now = std::chrono::system_clock::now();
    for (auto& row : store.kernels()) {
        std::string why;
        if (specs.find(row.spec_name) == nullptr) why = "its kernelspec '" + row.spec_name + "' is gone";
        else if (row.policy.lifetime.count() > 0 && now - row.created > row.policy.lifetime && !row.policy.pause_at_end)
            why = "its lifetime ran out while the gateway was down";
        else if (row.paused.empty() && row.policy.idle_timeout.count() > 0 &&
                 now - row.last_activity > row.policy.idle_timeout)
            why = "it was idle past its limit while the gateway was down";
        if (!why.empty()) {
            spdlog::info("kernel {}: not taken back: {}", row.id, why);
            store.remove_kernel(row.id);
            continue;
        }
        std::optional<launcher::sandbox_info> running;
        if (!row.paused.empty()) {  // taken back paused: nothing runs
            out.ids.insert(row.id);
            out.kernels.emplace_back(std::move(row), std::nullopt);
            continue;
        }
        try {
            const auto status = l.status(row.id);
            if (status.state == launcher::sandbox_state::running && status.info) running = status.info;
        } catch (const std::exception& e) {
            spdlog::warn("kernel {}: cannot read its sandbox's state: {}", row.id, e.what());
        }
        out.ids.insert(row.id);
        out.kernels.emplace_back(std::move(row), std::move(running));
    }
    return out;
}

// Kernel output arrives in buffers of a megabyte and more, made and freed on
// several threads. By default glibc raises its mmap threshold after the first
// such buffer is freed, so that later ones come from per-thread heaps, which
// keep their pages after a flood (the gateway stayed at 300-540 MiB). A fixed
// threshold keeps large buffers mmapped (returned when freed), and two arenas
// bound what the rest can strand. The MALLOC_* variables still win.
void tune_malloc() {
#ifdef __GLIBC__
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (std::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, 2);
#endif
}

// The usual soft fd limit (1,024) is a fraction of the hard one; raise it,
// and let libzmq have sockets in proportion (it caps them at 1,023 by
// default, apart from the fd limit). A socket costs about 2 fds (its mailbox
// and its connection) and the relay in front of it 2 more, and HTTP needs
// the rest: a quarter of the fds for sockets.
int raise_fd_limit() {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
    if (lim.rlim_cur < lim.rlim_max) {
        const rlim_t before = lim.rlim_cur;
        lim.rlim_cur = lim.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) (void)::getrlimit(RLIMIT_NOFILE, &lim);
        spdlog::info("fd limit raised from {} to {}", before, lim.rlim_cur);
    }
    const rlim_t sockets = std::min<rlim_t>(lim.rlim_cur / 4, 65535);
    return static_cast<int>(std::max<rlim_t>(sockets, 256));
}

std::unique_ptr<launcher::sandbox_launcher> make_launcher(const config::gateway_config& cfg) {
    if (!cfg.launcher_socket.empty()) {
        spdlog::info("sandboxes through the launcher service at {} (running as uid {})", cfg.launcher_socket,
                     ::geteuid());
        return std::make_unique<launcher::service::client>(cfg.launcher_socket);
    }
    if (::geteuid() != 0)
        spdlog::warn("running the launcher in process without root: sandboxes will not start "
                     "(use cellgate-launchd and --launcher-socket)");
    auto config = cfg.launcher;
    config.note = [](const std::string& line) { spdlog::info("launcher: {}", line); };
    return std::make_unique<launcher::launcher>(std::move(config));
}

// Every kernelspec can start here (its image, runtime and limits pass the
// launcher's checks); false after logging the first that cannot.
bool specs_can_start(const kernels::kernelspec_registry& specs, launcher::sandbox_launcher& launch) {
    for (const auto& [name, k] : specs.all()) {
        try {
            launch.validate(k.to_sandbox_spec({}, {}));
        } catch (const std::exception& e) {
            spdlog::error("kernelspec {} cannot start: {}", name, e.what());
            return false;
        }
    }
    return true;
}

// The kernels and Jupyter sessions an earlier gateway process left, back
// under this one; sessions whose kernel is gone are forgotten.
void take_back(kernels::state_store& store, const recovered& taken_back, kernels::kernel_manager& manager,
               kernels::session_registry& sessions) {
    manager.persist_to(&store);
    sessions.persist_to(&store);
    for (const auto& [row, running] : taken_back.kernels) {
        if (!row.paused.empty()) manager.adopt_paused(row);
        else manager.adopt(row, running);
    }
    for (const auto& s : store.sessions()) {
        if (taken_back.ids.count(s.kernel_id) != 0) sessions.restore(s);
        else store.remove_session(s.id);
    }
    // Snapshots outlive their sessions (and this process): their copies stay
    // under the launcher's state dir until deleted.
    for (const auto& r : store.records("volume")) {
        try {
            manager.adopt_volume(kernels::volume_from_json(r.body));
        } catch (const std::exception& e) {
            spdlog::warn("volume {}: its record is unreadable ({}); left out", r.id, e.what());
        }
    }
    for (const auto& r : store.records("snapshot")) {
        try {
            manager.adopt_snapshot(kernels::snapshot_from_json(r.body, kernels::kernel_policy{}));
        } catch (const std::exception& e) {
            spdlog::warn("snapshot {}: its record is unreadable ({}); left out", r.id, e.what());
        }
    }
    if (!taken_back.kernels.empty())
        spdlog::info("took back {} kernel(s) from {}", taken_back.kernels.size(), store.file().string());
}

// Returns what the routes' handlers hold (kept as long as the router).
std::shared_ptr<void> register_routes(http::router& routes, kit::services& services, agent::agent_service& agents,
                                      processes::process_table& processes, e2b::sandbox_book& e2b_book,
                                      kernels::state_store* store, core::runs& runs, core::runtime_table& runtimes,
                                      const config::gateway_config& cfg) {
    jupyter::register_misc_api(routes, services);
    jupyter::register_kernels_api(routes, services);
    jupyter::register_sessions_api(routes, services);
    jupyter::register_contents_api(routes, services);
    v1::register_agent_api(routes, services, agents);
    if (services.network) v1::register_network_api(routes, services, *services.network);
    v1::register_commands_api(routes, services, processes);
    v1::register_templates_api(routes, services);
    auto terminals = jupyter::register_terminals_api(routes, services, processes);
    web::register_static_api(routes, web::web_options{cfg.static_dir, cfg.output_scripts});
    auto e2b_options = cfg.e2b;
    e2b_options.https = cfg.certfile.has_value();
    auto e2b = e2b::register_e2b_api(routes, services, agents, processes, e2b_book, e2b_options);
    auto mcp_options = cfg.mcp;
    mcp_options.allow_origins = cfg.server.allow_origins;
    mcp_options.version = services.version;
    auto mcp = mcp::register_mcp_api(routes, services, agents, store, mcp_options);
    auto piston = piston::register_piston_api(routes, services, runs, runtimes, cfg.piston);
    return std::make_shared<std::vector<std::shared_ptr<void>>>(
        std::vector<std::shared_ptr<void>>{std::move(terminals), std::move(e2b), std::move(mcp), std::move(piston)});
}

void announce(const config::gateway_config& cfg, unsigned short port, bool generated_token) {
    if (cfg.port_file) std::ofstream(*cfg.port_file) << port << "\n";
    const std::string url =
        std::string(cfg.certfile ? "https" : "http") + "://" + cfg.server.ip + ":" + std::to_string(port) + "/";
    spdlog::info("cellgate listening on {}", url);
    if (generated_token)
        std::cout << "cellgate: no token given; use this one:\n    " << url << "?token=" << cfg.tokens[0].token
                  << "\n    Authorization: token " << cfg.tokens[0].token << std::endl;
}

// Runs the io threads until SIGINT or SIGTERM, then stops accepting, stops
// every kernel and returns.
void serve(asio::io_context& ioc, http::listener& server, kernels::kernel_manager& manager, int io_threads) {
    asio::signal_set signals(ioc, SIGINT, SIGTERM);
    std::thread stopper;
    signals.async_wait([&](const boost::system::error_code&, int sig) {
        spdlog::info("signal {}: shutting down (stop accepting, close sockets, stop kernels)", sig);
        server.stop();
        stopper = std::thread([&] {
            manager.shutdown_all();
            ioc.stop();
        });
    });
    const int n = io_threads > 0 ? io_threads : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (int i = 1; i < n; ++i) threads.emplace_back([&ioc] { ioc.run(); });
    ioc.run();
    for (auto& t : threads) t.join();
    if (stopper.joinable()) stopper.join();
}

}  // namespace

int main(int argc, char** argv) {
    tune_malloc();
    // Every socket write that can meet a closed peer must see EPIPE, not die
    // of SIGPIPE (Asio and the ZMTP guard pass MSG_NOSIGNAL; this covers any
    // other write, as cellgate-launchd and the relay do).
    std::signal(SIGPIPE, SIG_IGN);
    config::gateway_config cfg;
    try {
        cfg = config::parse_config(argc, argv, std::getenv("CELLGATE_TOKEN"));
    } catch (const config::config_error& e) {
        std::cerr << "cellgate: " << e.what() << "\n";
        return 2;
    }
    if (cfg.reference_only) {  // to stdout, exit 0: a page to redirect into docs/configuration.md
        std::cout << config::configuration_reference();
        return 0;
    }
    if (cfg.check_only) {
        std::cout << "cellgate: the configuration is valid\n";
        return 0;
    }
    // A cluster node's credentials, read before anything starts (review turn 3, H4).
    std::shared_ptr<const util::cluster_secret> cluster_secret;
    std::shared_ptr<const boost::asio::ssl::context> etcd_tls;
    if (!cfg.etcd.empty()) {
        try {
            cluster_secret = util::cluster_secret::from_file(cfg.cluster_secret_file);
            etcd_tls = util::make_tls_client(cfg.etcd_ca, cfg.etcd_cert, cfg.etcd_key);
        } catch (const std::exception& e) {
            std::cerr << "cellgate: " << e.what() << "\n";
            return 2;
        }
    }
    kernels::set_node_tag(cfg.node_tag);  // checked by parse_config; before any id is made
    spdlog::set_level(spdlog::level::from_str(cfg.log_level));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

    bool generated_token = false;
    if (cfg.tokens.empty()) {
        cfg.tokens.push_back({http::make_token(), "default", "default", 0, true});
        generated_token = true;
    }

    try {
        const auto backend = make_launcher(cfg);
        auto& launch = *backend;
        if (!cfg.kernelspecs_configured && !cfg.kernelspecs.empty())
            for (auto& k : kernels::builtin_language_kernelspecs(cfg.launcher.image_store, cfg.kernelspecs.front())) {
                // E2B's default template runs here: it keeps a pool as the default kernelspec does.
                if (k.name == "code-interpreter" && cfg.kernelspec_pools.count(k.name) == 0 && cfg.pool_size > 0)
                    cfg.manager.pool_size[k.name] = cfg.pool_size;
                cfg.kernelspecs.push_back(std::move(k));
            }
        kernels::kernelspec_registry specs(cfg.kernelspecs, cfg.default_kernelspec, cfg.launcher);
        for (const auto& [name, n] : cfg.manager.pool_size)
            if (specs.all().count(name) == 0) {
                spdlog::critical("--pool {}={}: no kernelspec {} (the languages image's are there once it is built)",
                                 name, n, name);
                return 2;
            }
        // The tenants' templates come back before the sessions that run on them.
        auto template_options = cfg.templates;
        template_options.state_dir = cfg.launcher.state_dir;
        template_options.build.pip_index_url = cfg.network.pip_index_url;
        templates::template_store template_store(launch, cfg.launcher, specs, std::move(template_options));
        std::unique_ptr<kernels::state_store> store;
        if (cfg.state_db != "none")
            store = std::make_unique<kernels::state_store>(cfg.state_db.empty() ? cfg.launcher.state_dir / "gateway.db"
                                                                                 : std::filesystem::path(cfg.state_db));
        const auto taken_back = store ? recover(*store, launch, specs) : recovered{};
        remove_leftovers(launch, taken_back.ids);
        if (!specs_can_start(specs, launch)) return 1;

        wire::zmq_reactor::options wire_options;
        wire_options.max_sockets = raise_fd_limit();
        wire::zmq_reactor reactor(wire_options);
        reactor.start();
        metrics::registry metrics;
        if (!cfg.node_tag.empty())
            metrics.add_gauge_source([tag = cfg.node_tag](std::string& out) {
                out += "# HELP cellgate_node_info this node's tag, the first group of its ids\n"
                       "# TYPE cellgate_node_info gauge\ncellgate_node_info{tag=\"" + tag + "\"} 1\n";
            });

        asio::io_context ioc;
        cfg.manager.launcher_rules = cfg.launcher;
        // Cells that reach a kernel other than through the agent service (a
        // Jupyter WebSocket client's, an E2B code context's) go to its ledger
        // too; the service is made after the manager, so the hook finds it here.
        std::atomic<agent::agent_service*> cell_ledger{nullptr};
        cfg.manager.kernel.on_cell = [&cell_ledger](const kernels::kernel& k, kernels::cell_summary cell) {
            if (auto* agents = cell_ledger.load()) agents->record_cell(k, std::move(cell));
        };
        kernels::kernel_manager manager(ioc, launch, reactor, specs, metrics, cfg.manager);
        kernels::session_registry sessions;
        // Egress: a proxy for the sessions that have a network (core/network.hpp).
        std::optional<egress::proxy> egress_proxy;
        auto& network = cfg.network;
        network.store = store.get();
        if (cfg.egress) {
            auto options = cfg.egress_proxy;
            if (cfg.egress_tls_intercept != "off") {
                // The CA lives with the gateway's state: a restart keeps what sandboxes trust.
                options.tls_authority = egress::certificate_authority::load_or_create(cfg.launcher.state_dir / "egress-ca");
                options.upstream_tls = egress::make_upstream_context(options.upstream_ca_files);
                options.intercept_all_tls = cfg.egress_tls_intercept == "all";
            }
            egress_proxy.emplace(ioc, std::move(options));
            network.ca_pem = egress_proxy->ca_certificate_pem();
            network.proxy = &*egress_proxy;
            template_store.set_egress(&*egress_proxy, network.ca_pem);
            metrics.add_gauge_source([&egress_proxy, &network](std::string& out) {
                egress_proxy->render_metrics(out);
                if (network.log_writer) network.log_writer->render_metrics(out);
            });
            manager.on_egress([&network](const kernels::kernel& k, const std::filesystem::path& dir) {
                core::attach_egress(k, dir, network);
            });
            manager.on_removed([&network, root = cfg.launcher.egress_root](const std::string& kernel_id) {
                core::detach_egress(kernel_id, root, network);
            });
        }
        if (store) take_back(*store, taken_back, manager, sessions);
        for (const auto& t : cfg.tokens)
            if (t.max_sessions > 0) manager.set_tenant_quota(t.tenant, t.max_sessions);
        // Checkpoints live in the workspaces now (.ipynb_checkpoints); earlier
        // versions kept uncapped copies here, on the host's disk.
        std::error_code ec;
        std::filesystem::remove_all(cfg.launcher.state_dir / "checkpoints", ec);
        manager.on_removed([&sessions](const std::string& kernel_id) { sessions.remove_for_kernel(kernel_id); });
        // Blocking file-system work (contents, /v1 files, snapshots) stays off the io threads.
        util::file_io_pool file_io(cfg.file_io);
        // Budgeted executions keep their whole output here, per session, for its life.
        const auto spool_root = (store ? store->file().parent_path() : cfg.launcher.state_dir) / "outputs";
        remove_spools_of_others(spool_root, taken_back.ids);
        agent::agent_service agents(ioc, manager, cfg.agent, &file_io, store.get(), spool_root);
        metrics.add_gauge_source([&agents](std::string& out) { agents.ledger().render_metrics(out); });
        cell_ledger.store(&agents);
        kit::services services{manager, sessions, metrics, "2.0.0", &file_io};
        services.staging = std::make_shared<kit::upload_staging>(cfg.upload_staging_per_tenant);
        metrics.add_gauge_source([staging = services.staging](std::string& out) { staging->render(out); });
        if (egress_proxy) {
            services.network = &network;
            agents.set_egress_summary([&network](const std::string& id, std::int64_t from, std::int64_t to) {
                return core::egress_summary(id, from, to, network);
            });
        }
        // The core's front door, which every surface starts its sessions through.
        core::sessions session_starts(manager, agents.limits(), services.network);
        services.core = &session_starts;
        template_store.kernelspecs_in_use = [&manager] { return manager.spec_names_in_use(); };
        manager.on_removed([&template_store](const std::string&) { template_store.reclaim(); });
        // One-shot runs: the built-in runtimes run in the languages image's
        // sandboxes without cells ("runs"), from their own pool.
        core::runtime_table runtimes;
        if (const auto* runs_spec = specs.find("runs"); runs_spec != nullptr && runs_spec->image == kernels::language_image) {
            try {
                for (auto& rt : core::builtin_runtimes(cfg.launcher.image_store, runs_spec->name)) runtimes.add(std::move(rt));
            } catch (const std::exception& e) {
                spdlog::error("the built-in runtimes are not offered: {}", e.what());
            }
        }
        // A template's runtimes are its tenant's, run in its own sandboxes.
        template_store.set_runtimes = [&runtimes](const std::string& spec, const std::string& tenant, const nlohmann::json& list) {
            runtimes.remove_kernelspec(spec);
            try {
                for (auto& rt : core::runtimes_from_json(list, spec)) {
                    rt.owner = tenant;
                    runtimes.add(std::move(rt));
                }
            } catch (const std::exception& e) {
                spdlog::error("template {}: its runtimes are not offered: {}", spec, e.what());
            }
        };
        template_store.set_pool = [&manager](const std::string& spec, std::size_t size) { manager.set_pool(spec, size); };
        template_store.start_pools();
        session_starts.set_templates(&template_store);
        // Builds end before what they use (the proxy, the manager) goes.
        struct stop_builds {
            templates::template_store& store;
            ~stop_builds() { store.stop(); }
        } builds_stop_first{template_store};
        services.templates = &template_store;
        metrics.add_gauge_source([&template_store](std::string& out) { template_store.render_metrics(out); });
        core::executions cells(manager, agents);
        services.cells = &cells;

        // The kernel channels' WebSocket is the Jupyter surface's; the transport hands the upgrade over.
        const auto channels = jupyter::kernel_channels(manager);
        http::server_context ctx(cfg.server, http::authenticator(cfg.tokens), metrics);
        ctx.channels = &channels;
        metrics.open_connections = [&ctx] { return ctx.connections.open(); };
        metrics.add_gauge_source([&ctx](std::string& out) {
            out += "# HELP cellgate_auth_throttled_total Requests refused (429) because their address failed to "
                   "authenticate --max-auth-failures times in a row.\n# TYPE cellgate_auth_throttled_total counter\n"
                   "cellgate_auth_throttled_total " + std::to_string(ctx.auth_failures.refusals()) + "\n";
        });
        // Commands and terminals inside the sandboxes; a session's end takes them.
        processes::process_table processes(ioc, launch, cfg.processes);
        metrics.add_gauge_source([&processes](std::string& out) { processes.render(out); });
        manager.on_removed([&processes](const std::string& kernel_id) { processes.remove_session(kernel_id); });
        e2b::sandbox_book e2b_book(store.get());
        core::runs runs(session_starts, processes, file_io, cfg.runs);
        if (cfg.runtime_pool > 0)
            runs.on_first_run([&manager, &specs, size = cfg.runtime_pool](const std::string& spec) {
                // The built-in runtimes' pool; a template's runtimes use its own (kernel.pool).
                if (const auto* k = specs.find(spec); k != nullptr && k->owner.empty()) manager.set_pool(spec, size);
            });
        metrics.add_gauge_source([&runs](std::string& out) { runs.render(out); });
        services.runs = &runs;
        services.runtimes = &runtimes;
        const auto surfaces =
            register_routes(ctx.routes, services, agents, processes, e2b_book, store.get(), runs, runtimes, cfg);

        http::listener server(ioc, ctx, make_tls(cfg));
        const auto port = server.listen();
        if (egress_proxy) egress_proxy->forbid_port(port);  // sandboxes never reach the gateway itself
        // A cluster node: its record on a lease in etcd, and no new session
        // while that lease may lapse (cluster/membership.hpp).
        std::unique_ptr<cluster::membership> member;
        if (!cfg.etcd.empty()) {
            cluster::membership::options mo;
            mo.etcd = cluster::etcd_client::parse_endpoints(cfg.etcd);
            mo.tag = cfg.node_tag;
            mo.address = cfg.node_address.empty() ? cfg.server.ip + ":" + std::to_string(port) : cfg.node_address;
            mo.ttl = std::chrono::seconds(cfg.lease_ttl);
            mo.tls = etcd_tls;
            mo.secret = cluster_secret;
            member = std::make_unique<cluster::membership>(std::move(mo), [&manager] {
                const auto load = manager.load();
                return nlohmann::json{{"admitted", load.admitted}, {"max_kernels", load.max_kernels},
                                      {"pool_ready", load.pool_ready}, {"pool_waiting", load.pool_waiting}};
            });
            // Fencing and the cluster-wide quota, before every new kernel.
            manager.set_admission_gate([m = member.get()](const std::string& tenant, std::size_t count,
                                                          std::size_t limit) -> std::optional<kernels::failure> {
                const auto r = m->reserve(tenant, count, limit);
                using outcome = cluster::membership::reservation::outcome;
                if (r.result == outcome::admitted) return std::nullopt;
                return kernels::failure{
                    r.result == outcome::over_quota ? kernels::failure_kind::over_quota : kernels::failure_kind::unavailable,
                    r.why};
            });
            member->count_kernels_with([&manager] { return manager.admitted_by_tenant(); });
            member->index_tenants_with([&manager] { return manager.tenants_held(); });
            // Peers as (tag, address) pairs, for the surfaces.
            using peer_pairs = std::optional<std::vector<std::pair<std::string, std::string>>>;
            const auto pairs = [](std::optional<std::vector<cluster::membership::peer>> peers) -> peer_pairs {
                if (!peers) return std::nullopt;
                std::vector<std::pair<std::string, std::string>> out;
                for (auto& p : *peers) out.emplace_back(std::move(p.tag), std::move(p.address));
                return out;
            };
            services.cluster_peers = [m = member.get(), pairs] { return pairs(m->peers()); };
            services.cluster_holders = [m = member.get(), pairs](const std::string& tenant) {
                return pairs(m->holders(tenant));
            };
            services.node_tag = cfg.node_tag;
            // Requests between nodes: signed, and never with a tenant's token (http/peer_auth.hpp).
            auto peers = std::make_shared<http::peer_auth>(cfg.node_tag, cluster_secret);
            services.peer_auth = peers;
            ctx.hops.peers = peers;
            metrics.add_gauge_source([peers](std::string& out) { peers->render(out); });
            // A request for an id another node made is relayed to that node (http/hop.hpp).
            ctx.hops.tag = cfg.node_tag;
            ctx.hops.locate = [m = member.get()](const std::string& tag) {
                auto o = m->locate(tag);
                using kind = cluster::membership::owner::kind;
                http::hop_owner h;
                h.what = o.what == kind::peer   ? http::hop_owner::kind::peer
                         : o.what == kind::gone ? http::hop_owner::kind::gone
                         : o.what == kind::self ? http::hop_owner::kind::self
                                                : http::hop_owner::kind::unknown;
                h.address = std::move(o.address);
                return h;
            };
            manager.on_removed([m = member.get()](const std::string&) { m->nudge(); });
            metrics.add_gauge_source([m = member.get()](std::string& out) { m->render(out); });
            member->start();
        }
        announce(cfg, port, generated_token);
        manager.start();
        serve(ioc, server, manager, cfg.io_threads);
        if (member) member->stop();  // the lease is revoked: the node's record goes now
        file_io.stop();  // its jobs use the services and the manager below
        if (network.log_writer) network.log_writer->stop();  // what is queued is written while the store is there
        reactor.stop();
        cell_ledger.store(nullptr);  // the service goes first
        spdlog::info("cellgate stopped");
    } catch (const std::exception& e) {
        spdlog::critical("cellgate: {}", e.what());
        return 1;
    }
    return 0;
}
