#pragma once

// One-shot program runs (Piston's /api/v2 and /v1/execute's `language`):
// a fresh sandbox of the runtime's kernelspec (claimed from its warm pool,
// never shared), the files written to its workspace, the compile stage then
// the run stage, each a process of the sandbox (the kernel's confinement:
// uid, namespaces, cgroup, seccomp, no network unless the tenant's policy
// gives one) held to its wall time, CPU time, address space and output
// limits, and measured from the sandbox's cgroup; then the sandbox ends.
//
// Admission: a tenant runs at most `running_per_tenant` at once; more wait
// in its queue, in order, up to `queued_per_tenant`; past that a run is
// refused (429, with a Retry-After), never dropped.

#include "core/runtimes.hpp"
#include "core/sessions.hpp"
#include "processes/process_table.hpp"
#include "util/file_io_pool.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cellgate::core {

struct stage_limits {
    std::chrono::milliseconds wall{3000};
    std::chrono::milliseconds cpu{3000};
    std::int64_t memory = -1;  // bytes of address space; -1: none (the sandbox's memory cap still holds)
    std::size_t output = 1024;  // characters each of stdout and stderr
};

struct run_file {
    std::string name;
    std::string content;  // bytes
};

struct run_request {
    std::string tenant;
    runtime rt;
    std::vector<run_file> files;  // the first is the entry point
    std::string stdin_data;
    bool interactive = false;     // stdin comes later (run_handle), and is closed by the caller
    std::vector<std::string> args;
    stage_limits compile, run;
    std::map<std::string, std::string> env;  // the session's KERNEL_* environment
};

enum class stage_kind { compile, run };
std::string_view to_string(stage_kind s) noexcept;

struct stage_result {
    std::string stdout_, stderr_, output;  // output: both, in the order they came
    std::optional<int> code;               // the exit status; none when a signal ended it
    std::string signal;                    // "SIGKILL", …; "" none
    // Piston's (isolate's): "" (null) for a clean exit, RE runtime error,
    // SG signal, TO time limit, OL/EL stdout/stderr over the limit, XX internal.
    std::string status;
    std::string message;
    std::uint64_t memory = 0;  // bytes: the sandbox's peak above its use before the stage
    std::int64_t cpu_ms = 0, wall_ms = 0;
};

struct run_result {
    std::optional<stage_result> compile;
    std::optional<stage_result> run;  // none when compile failed
};

// What a run tells its caller, in order, from any thread (never two at once).
class run_observer {
public:
    virtual ~run_observer() = default;
    virtual void admitted() {}
    virtual void stage(stage_kind) {}
    virtual void data(stage_kind, bool is_stderr, const std::string& bytes) { (void)is_stderr, (void)bytes; }
    virtual void stage_done(stage_kind, const stage_result&) {}
    virtual void done(run_result result) = 0;
    // It did not run: an HTTP status (400, 404, 429, 500, 503) and why.
    virtual void failed(unsigned status, std::string message, std::optional<std::chrono::seconds> retry_after) = 0;
};

// A run under way: its stdin and its signals (the run stage's; before it
// starts, stdin waits and a signal is kept for it).
class run_handle {
public:
    virtual ~run_handle() = default;
    virtual void write_stdin(std::string data) = 0;
    virtual void close_stdin() = 0;
    virtual void signal(int sig) = 0;
    virtual void abandon() = 0;  // the caller left: end it now
};

struct run_limits {
    std::size_t running_per_tenant = 8;
    std::size_t queued_per_tenant = 256;
    std::size_t max_files = 64;
    std::size_t max_file_bytes = 10u << 20;  // all files together
    std::size_t max_stdin_bytes = 10u << 20;
    std::size_t max_args = 256;
};

class runs {
public:
    runs(sessions& core, processes::process_table& processes, util::file_io_pool& file_io, run_limits limits = {});
    ~runs();

    // Starts `r` (or queues it); the observer hears the rest. Never throws.
    std::shared_ptr<run_handle> start(run_request r, std::shared_ptr<run_observer> observer);

    // Called once per kernelspec, at its first run (a runtime's pool starts
    // with the first job, so a gateway nobody runs jobs on keeps none).
    void on_first_run(std::function<void(const std::string& kernelspec)> warm) { warm_ = std::move(warm); }

    const run_limits& limits() const noexcept { return limits_; }
    boost::asio::io_context& io() noexcept { return processes_.io(); }
    // Prometheus: cellgate_runs_running, cellgate_runs_queued, cellgate_runs_refused_total.
    void render(std::string& out) const;

    class job;  // runs.cpp

private:
    friend class job;
    void admit(const std::shared_ptr<job>& j);
    void finished(const std::string& tenant);

    sessions& core_;
    processes::process_table& processes_;
    util::file_io_pool& file_io_;
    const run_limits limits_;
    mutable std::mutex mutex_;
    struct tenant_queue {
        std::size_t running = 0;
        std::deque<std::shared_ptr<job>> waiting;
    };
    std::map<std::string, tenant_queue> tenants_;
    std::function<void(const std::string&)> warm_;
    std::set<std::string> warmed_;
    std::uint64_t refused_ = 0;
};

}  // namespace cellgate::core
