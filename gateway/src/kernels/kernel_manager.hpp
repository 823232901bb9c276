#pragma once

#include "cellgate/launcher/sandbox_launcher.hpp"
#include "kernels/admission.hpp"
#include "kernels/failure.hpp"
#include "kernels/kernel.hpp"
#include "kernels/kernelspecs.hpp"
#include "kernels/launch_gate.hpp"
#include "kernels/restart_budget.hpp"
#include "kernels/snapshot.hpp"
#include "kernels/volume.hpp"
#include "kernels/warm_pool.hpp"
#include "kernels/state_store.hpp"
#include "metrics/metrics.hpp"
#include "wire/zmq_reactor.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::kernels {

struct manager_config {
    kernel_settings kernel;
    std::size_t max_kernels = 64;                 // in total, counted at admission
    // One token must not take every slot of the total (review: one tenant could
    // start kernels up to max_kernels and starve the rest). 0: only the total.
    std::size_t max_kernels_per_tenant = 16;
    // Every session's limits, per surface, kernelspec and tenant (policy.hpp);
    // a start without a policy of its own gets the Jupyter surface's.
    policy_book policies;
    // How often running WebSocket cells are checked against their time limit,
    // and how long any cell (WebSocket, /v1 execution, E2B code context) may
    // go on after its interrupt before its kernel is restarted.
    std::chrono::milliseconds cell_check_interval{250};
    std::chrono::seconds cell_interrupt_grace{5};
    bool auto_restart = true;                     // restart a kernel that died
    int restart_limit = 5;                        // …at most this often per window
    std::chrono::seconds restart_window{300};
    // Milliseconds, so that a unit test can run heartbeats well under a second
    // apart with a timeout a few intervals long (kernel_manager_test.cpp).
    std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(3);
    std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(30);  // no echo this long: the kernel is dead
    std::chrono::milliseconds nudge_interval{20};
    std::chrono::seconds ready_timeout{30};
    std::size_t launch_threads = 4;
    // Sandbox starts and restarts one tenant may have on the launch threads at
    // once; more wait in the tenant's own queue (launch_gate.hpp).
    std::size_t max_launches_per_tenant = 2;
    // The launcher's rules, for env checked here before any start or claim
    // (a warm claim never passes through the launcher: review L14).
    launcher::launcher_config launcher_rules;
    // Warm pool: sandboxes started ahead of demand with these modules already
    // imported; claiming one is a pop, not a start. Per kernelspec name.
    std::map<std::string, std::size_t> pool_size;
    // How far misses may raise a spec's pool for `pool_growth_window` (a burst
    // makes the next one find more ready); unset: 4 × its size.
    std::map<std::string, std::size_t> pool_max;
    std::chrono::seconds pool_growth_window{300};
    // A template's pool (set_pool) unused this long drops to nothing until its next claim.
    std::chrono::seconds template_pool_idle{1800};
    // Pool starts under way at once; as many again for claims that missed
    // (warm_pool.hpp: a burst's starts run in turn, not all at once).
    std::size_t pool_concurrency = 2;
    std::vector<std::string> pool_preload = {"numpy", "pandas", "matplotlib.pyplot"};
    // Snapshots one tenant may keep (each holds a copy of a workspace on disk). 0: no cap.
    std::size_t max_snapshots_per_tenant = 16;
    // Named volumes one tenant may have, and their sizes together. 0: no cap.
    std::size_t max_volumes_per_tenant = 8;
    std::uint64_t max_volume_bytes_per_tenant = 32ull << 30;
};

// Starts, restarts, interrupts and stops kernels; owns the registry. Blocking
// launcher calls run on its own thread pool, never on the network threads.
// Completion callbacks run on that pool or an io thread: callers post their
// replies back to their own strand.
class kernel_manager {
public:
    using done_kernel = std::function<void(std::optional<failure>, kernel_ptr)>;
    using done = std::function<void(std::optional<failure>)>;
    using done_snapshot = std::function<void(std::optional<failure>, snapshot_record)>;
    using done_kernels = std::function<void(std::optional<failure>, std::vector<kernel_ptr>)>;
    using done_fork = std::function<void(std::optional<failure>, snapshot_record, std::vector<kernel_ptr>)>;

    kernel_manager(boost::asio::io_context& ioc, launcher::sandbox_launcher& launcher, wire::zmq_reactor& reactor,
                   const kernelspec_registry& specs, metrics::registry& metrics, manager_config config);
    ~kernel_manager();

    void start();  // periodic heartbeats and housekeeping

    // Kernels are written to `store` when admitted and forgotten when removed;
    // activity times are saved with the housekeeping tick. Set before start().
    void persist_to(state_store* store) noexcept { store_ = store; }
    // Takes back a kernel an earlier gateway process left running: its sockets
    // are re-bound to the live sandbox (state intact), or, when the sandbox is
    // gone, it is restarted in its kept workspace as after a crash. Counted at
    // admission like any other kernel. Call before start().
    void adopt(const persisted_kernel& row, const std::optional<launcher::sandbox_info>& running);
    // A kernel that was paused when the earlier gateway stopped: taken back
    // paused, to resume when asked (counted at admission like the others).
    void adopt_paused(const persisted_kernel& row);

    // `env` holds only KERNEL_* names (others are refused with 400 by the caller).
    void start_kernel(const std::string& tenant, const std::string& spec_name,
                      const std::map<std::string, std::string>& env, done_kernel callback,
                      std::optional<kernel_policy> policy = std::nullopt);
    // Called (on the launch pool) after a kernel is gone for good, however it went.
    void on_removed(std::function<void(const std::string& kernel_id)> listener);
    // Asked before new kernels are admitted (starts, forks: `count` of them;
    // not restarts or resumes of kernels already held), with the tenant's
    // cap: a failure refuses them. A cluster node refuses when it has lost
    // etcd (unavailable, 503) or the tenant is at its cap across the cluster
    // (over_quota, 429): cluster/membership.hpp. It may block for etcd
    // round trips, so it runs on a thread of its own, never on an io
    // thread. Set before start().
    using admission_gate = std::function<std::optional<failure>(const std::string& tenant, std::size_t count,
                                                                std::size_t limit)>;
    void set_admission_gate(admission_gate gate) { admission_gate_ = std::move(gate); }
    // Kernels admitted per tenant on this node (a cluster node publishes them).
    std::map<std::string, std::size_t> admitted_by_tenant() const;
    // The tenants this node holds anything of: an admitted kernel or a snapshot.
    std::set<std::string> tenants_held() const;
    // A kernel whose policy has a network gets <egress_root>/<id>/ (made
    // here) mounted in its sandbox; this is called with that directory before
    // every launch of it and when a restarted gateway takes it back, so the
    // egress proxy listens there. A throw fails the launch. Set before start().
    void on_egress(std::function<void(const kernel& k, const std::filesystem::path& dir)> hook);
    // The sandbox's CPU time and memory peak (resetting the peak), from its
    // cgroup through the launcher; nothing when it cannot be read. Blocks:
    // call it off the io threads.
    std::optional<launcher::sandbox_usage> sandbox_usage(const std::string& kernel_id, bool reset_peak);
    // A tenant's own cap on kernels (from the tokens file); 0 = the default.
    void set_tenant_quota(const std::string& tenant, std::size_t max_kernels);
    kernel_ptr find(const std::string& tenant, const std::string& id) const;
    std::vector<kernel_ptr> list(const std::string& tenant) const;
    // Keeps `size` warm kernels of kernelspec `spec` from now on (a
    // template's pool; 0: none): the ready ones it had are stopped first,
    // since the spec may now run another image.
    void set_pool(const std::string& spec, std::size_t size);
    // The kernelspecs every kernel held now runs (any tenant's, pooled ones too).
    std::set<std::string> spec_names_in_use() const;
    std::size_t count() const;
    // What a cluster node publishes about itself (cluster/membership.hpp).
    struct load_figures {
        std::size_t admitted = 0, max_kernels = 0, pool_ready = 0, pool_waiting = 0;
    };
    load_figures load() const;

    void interrupt(const kernel_ptr& k, done callback);
    void restart(const kernel_ptr& k, done callback);
    // A kernel left dead (its restart failed, or the restart budget is spent)
    // is restarted now, unless a restart or shutdown is already under way, the
    // pause after its last failed restart has not passed, or the restart
    // budget (restart_limit per restart_window) is spent: a client that keeps
    // calling must not turn a start that hangs into a loop on the launch
    // threads. Returns whether one was started.
    bool revive(const kernel_ptr& k);
    void shutdown(const kernel_ptr& k, done callback, const std::string& reason = "kernel shut down");

    // Pause (kernel_manager_pause.cpp): the sandbox stops and its CPU and
    // memory are given back; the kernel keeps its id, its files and — where
    // the runtime checkpoints (runsc) — its memory, on disk under the
    // launcher's state dir. A paused kernel survives a gateway restart.
    // Pausing a paused kernel is a no-op; `busy` while a restart, pause or
    // resume is under way.
    void pause(const kernel_ptr& k, done callback);
    // Starts a paused kernel again: from its memory image (the same kernel,
    // its variables intact), or, when only its files were kept, as a new
    // kernel on them (kernel model: cellgate.pause.resumed_from). Calls back
    // once it answers; resuming a running kernel is a no-op. A resume that
    // fails (a corrupt image, say) leaves the kernel dead with the reason in
    // its model, and touches nothing else.
    void resume(const kernel_ptr& k, done callback);
    // Stops every kernel; blocks until all are gone.
    void shutdown_all();

    // Snapshots and fork (kernel_manager_fork.cpp). snapshot(): a named,
    // immutable copy of the session's workspace, taken while it runs on;
    // over_quota past max_snapshots_per_tenant, busy during a restart,
    // pause or resume. It outlives its session until deleted.
    void snapshot(const kernel_ptr& k, const std::string& name, done_snapshot callback);
    std::optional<snapshot_record> find_snapshot(const std::string& tenant, const std::string& id) const;
    std::vector<snapshot_record> snapshots(const std::string& tenant) const;
    void delete_snapshot(const std::string& tenant, const std::string& id, done callback);
    // One kept in the state store by an earlier gateway. Call before start().
    void adopt_snapshot(const snapshot_record& s);
    // `count` new sessions, each on its own copy of the snapshot's
    // workspace, with the source's kernelspec, environment and (unless
    // given) policy. All or none: admitted together (over_quota, nothing
    // started), and if one fails to start the others are shut down.
    void start_from_snapshot(const std::string& tenant, const std::string& snapshot_id, std::size_t count,
                             std::optional<kernel_policy> policy, done_kernels callback);
    // A snapshot and `count` children from it; past the quota nothing is
    // made, and when the children fail the snapshot goes too.
    void fork(const kernel_ptr& k, std::size_t count, const std::string& name, done_fork callback);

    // Named volumes (kernel_manager_volumes.cpp): per tenant, by name; an
    // ext4 image each, mounted into sessions that name it at start
    // (kernel_policy::volumes), outliving them. One session at a time may
    // mount a volume read-write (busy otherwise); any number read-only.
    using done_volume = std::function<void(std::optional<failure>, volume_record)>;
    void create_volume(const std::string& tenant, const std::string& name, std::uint64_t bytes, done_volume callback);
    std::optional<volume_record> find_volume(const std::string& tenant, const std::string& name) const;
    std::vector<volume_record> volumes(const std::string& tenant) const;
    // The sessions that mount it (id, attachment).
    std::vector<std::pair<std::string, volume_attachment>> volume_users(const std::string& volume_id) const;
    // Its size and use, from the launcher (blocks: call it off the io threads).
    launcher::volume_info volume_usage(const std::string& volume_id);
    // busy while a session mounts it.
    void delete_volume(const std::string& tenant, const std::string& name, done callback);
    void adopt_volume(const volume_record& v);  // kept by an earlier gateway; before start()

    const kernelspec_registry& specs() const noexcept { return specs_; }
    const manager_config& config() const noexcept { return config_; }

private:
    struct record {
        record(kernel_ptr kernel, restart_budget budget_, std::map<std::string, std::string> env_ = {},
               std::chrono::system_clock::time_point activity = {})
            : k(std::move(kernel)), env(std::move(env_)), budget(budget_), saved_activity(activity) {}
        kernel_ptr k;
        std::map<std::string, std::string> env;
        restart_budget budget;  // automatic restarts and revives
        bool busy_lifecycle = false;  // a restart or shutdown is under way
        std::chrono::system_clock::time_point saved_activity{};  // as last written to the store
        // The sandbox a restart started died before the restart was done:
        // kept until it is (relaunch), since nothing else would look again.
        struct death {
            std::int64_t pid;
            std::string why;
            bool oom;
        };
        std::optional<death> died_while_busy;
        bool resuming = false;
        std::vector<done> resume_waiters;      // everyone who asked while it resumes
        std::vector<done> pause_after_resume;  // pauses asked for while it resumed
    };
    void finish_pause(const kernel_ptr& k, launcher::checkpoint_info c, const std::string& note);
    void finish_resume(const kernel_ptr& k, std::optional<failure> f);
    void resume_on_demand(const kernel_ptr& k);
    void wake_on_demand(const kernel_ptr& k);  // a client's message to it while paused resumes it
    void persist(const kernel_ptr& k, const std::map<std::string, std::string>& env);
    restart_budget new_budget() const { return {config_.restart_limit, config_.restart_window}; }
    // Admission of `count` new kernels: the request's checks, the gate (off
    // the io threads, when set), then this node's caps. `then` hears the
    // outcome once: at once without a gate, else on the io context. Admitted
    // kernels hold their places until started or released.
    void admit(const std::string& tenant, const std::string& spec_name, const std::map<std::string, std::string>& env,
               std::size_t count, std::function<void(std::optional<failure>)> then);
    std::optional<failure> admit_locally(const std::string& tenant, std::size_t count);
    void start_admitted(const std::string& tenant, const std::string& spec_name,
                        const std::map<std::string, std::string>& env, done_kernel callback,
                        std::optional<kernel_policy> policy);
    void start_admitted_from(const snapshot_record& s, std::size_t count, std::optional<kernel_policy> policy,
                             done_kernels callback);
    // A session's read-write volumes, claimed for `kernel_id` (busy when
    // another session writes one; no_such_kernel for an unknown one).
    std::optional<failure> claim_volumes(const std::string& tenant, const std::string& kernel_id,
                                         const std::vector<volume_attachment>& volumes);
    void release_volumes_locked(const std::string& kernel_id);
    void reclaim_volumes_locked(const std::string& kernel_id, const std::vector<volume_attachment>& volumes);
    // Blocks (on a launch thread) while a snapshot copies this kernel's workspace.
    void wait_for_copies(const std::string& kernel_id);
    void launch_new(const kernel_ptr& k, const launcher::sandbox_spec& spec,
                    const std::map<std::string, std::string>& env, const done_kernel& callback);

    launcher::sandbox_spec spec_for(const kernel& k, const std::map<std::string, std::string>& env) const;
    // The one way a sandbox becomes a kernel, for a start, a restart, a warm
    // sandbox and one taken back after a gateway restart: connect its
    // sockets, watch its init's pid, wait for its first kernel_info reply.
    void bring_up(const kernel_ptr& k, launcher::sandbox_info sandbox, std::function<void(bool)> then);
    void watch_process(const kernel_ptr& k, std::int64_t pid);
    void wait_ready(const kernel_ptr& k, std::function<void(bool)> then);
    void on_died(const kernel_ptr& k, std::int64_t pid, const std::string& why);
    void confirm_death(const kernel_ptr& k, std::int64_t pid, const std::string& why, bool oom);
    bool is_registered(const kernel_ptr& k) const;
    void do_restart(const kernel_ptr& k, done callback, bool automatic);
    void relaunch(const kernel_ptr& k, const launcher::sandbox_spec& spec, bool automatic, const done& callback);
    void restart_failed(const kernel_ptr& k, const std::string& what, const done& callback);
    void tick();
    void check_cells();  // time limits of WebSocket cells (cell_watch.hpp)
    void gauges(std::string& out) const;
    // Warm pool.
    void replenish();
    void start_pooled(const kernel_ptr& k, const launcher::sandbox_spec& spec, const warm_pool::start& order);
    void claim(const kernel_ptr& k, const std::string& tenant, const std::map<std::string, std::string>& env,
               const kernel_policy& policy, done_kernel callback);
    void drop_from_pool(const kernel_ptr& k, const std::string& why);
    // Closes a kernel that left the pool and removes its sandbox on the launch pool, then `then`.
    void stop_warm(const kernel_ptr& k, const std::string& why, std::function<void()> then = {});

    boost::asio::io_context& ioc_;
    launcher::sandbox_launcher& launcher_;
    wire::zmq_reactor& reactor_;
    const kernelspec_registry& specs_;
    metrics::registry& metrics_;
    const manager_config config_;
    boost::asio::thread_pool launch_pool_;
    launch_gate launches_;  // starts and restarts, per tenant, onto launch_pool_
    boost::asio::thread_pool gate_pool_{1};  // the admission gate's calls (etcd round trips)
    boost::asio::steady_timer tick_timer_;
    boost::asio::steady_timer cell_timer_;

    mutable std::mutex mutex_;
    std::map<std::string, record> kernels_;
    admission admission_;  // kernels plus starts under way, under mutex_
    bool shutting_down_ = false;
    admission_gate admission_gate_;
    std::vector<std::function<void(const std::string&)>> removal_listeners_;
    std::function<void(const kernel&, const std::filesystem::path&)> egress_hook_;
    // Makes the kernel's egress dir and calls the hook; throws.
    void prepare_egress(const kernel& k, const launcher::sandbox_spec& spec);
    warm_pool pool_;  // under mutex_
    std::map<std::string, snapshot_record> snapshots_;   // by id; mode empty while being taken
    std::map<std::string, int> copying_;                 // kernel id → snapshots copying its workspace
    std::map<std::string, std::size_t> starting_from_;   // snapshot id → children starting from it
    std::condition_variable copy_done_;
    std::map<std::string, volume_record> volumes_;        // by id
    std::map<std::string, std::string> volume_writers_;  // volume id → the kernel that mounts it read-write
    state_store* store_ = nullptr;
};

}  // namespace cellgate::kernels
