#pragma once

// Processes inside a session's sandbox: commands (E2B's commands.run, the
// /v1 commands API) and terminals (Jupyter's /api/terminals). Each is a
// launcher exec (the kernel's own confinement: uid, namespaces, cgroup,
// seccomp, no network) that this table owns; surfaces only start, watch,
// feed and signal them. A process's output is read on the io threads into a
// bounded backlog (what a late or returning watcher is replayed) and handed
// to its watchers as it comes; nothing here blocks an io thread (the exec
// itself runs on the table's own threads).
//
// Bounds: processes per session and in all, output kept per process, stdin
// accepted per write; a session that ends takes its processes with it.

#include "kernels/kernel.hpp"

#include "cellgate/launcher/exec_process.hpp"
#include "cellgate/launcher/exec_spec.hpp"
#include "cellgate/launcher/sandbox_launcher.hpp"

#include "util/file_io_pool.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::processes {

struct process_limits {
    std::size_t per_session = 16;             // as the launcher's own cap
    std::size_t total = 1024;
    std::size_t backlog_bytes = 1u << 20;     // output kept for replay, per process
    std::size_t max_stdin_bytes = 1u << 20;   // one write
    std::chrono::milliseconds output_grace{300};  // after the exit, for output still in the pipes
    // Starts (the launcher's exec, up to ~30 s each under a slow runtime) run
    // on their own threads, fair between tenants (security review turn 3,
    // M4): one tenant has at most `starts_per_tenant` running and
    // `queued_starts_per_tenant` waiting; past that 429 (503 when all wait).
    std::size_t start_threads = 4;
    std::size_t starts_per_tenant = 2;         // --max-process-starts-per-tenant
    std::size_t queued_starts_per_tenant = 32;
};

enum class stream { stdout_, stderr_, pty };
std::string_view to_string(stream s) noexcept;

struct process_exit {
    int code = 0;    // 128 + n for signal n
    int signal = 0;  // 0: it exited
    std::string error;  // why it could not be told (the sandbox went)
};

struct command {
    launcher::exec_spec spec;
    std::string tag;  // the client's own name for it (E2B's tag, a terminal's name)
    // The gateway's own helper in the sandbox (a code context's interpreter):
    // it counts against the bounds but is never listed or found by pid or tag,
    // so no surface can signal or feed it; its owner holds the process.
    bool internal = false;
};

// Told what a process does, on the process's strand, in order: its backlog
// first (when it subscribes), then each piece of output, then the exit.
class watcher {
public:
    virtual ~watcher() = default;
    virtual void output(stream s, const std::string& bytes) = 0;
    virtual void exited(const process_exit& e) = 0;
};

class process : public std::enable_shared_from_this<process> {
public:
    process(boost::asio::io_context& ioc, std::uint32_t pid, std::string kernel_id, std::string tenant, command c,
            const process_limits& limits);
    ~process();

    std::uint32_t pid() const noexcept { return pid_; }
    const std::string& kernel_id() const noexcept { return kernel_id_; }
    const std::string& tenant() const noexcept { return tenant_; }
    const command& config() const noexcept { return command_; }
    std::chrono::system_clock::time_point started() const noexcept { return started_; }
    std::optional<process_exit> exit() const;
    bool running() const { return !exit().has_value(); }

    // Replays the backlog, then follows. Returns an id for unsubscribe.
    std::uint64_t subscribe(std::shared_ptr<watcher> w);
    void unsubscribe(std::uint64_t id);

    // False (with the reason) when there is no stdin, it is closed, or the
    // write is over the limit.
    bool write_stdin(std::string data, std::string& why);
    void close_stdin();
    void signal(int sig);  // one of launcher::is_exec_signal's
    void resize(std::uint16_t rows, std::uint16_t cols);
    // Ends it now (SIGKILL) and drops its descriptors.
    void kill();

    // The table's: attaches the running exec and starts reading.
    void attach(launcher::exec_process p);

private:
    void read(stream s, std::shared_ptr<boost::asio::posix::stream_descriptor> d);
    void watch_exit();
    void on_output(stream s, std::string bytes);
    void on_stream_closed();
    void finish();
    void pump_stdin();

    boost::asio::strand<boost::asio::io_context::executor_type> strand_;
    const std::uint32_t pid_;
    const std::string kernel_id_, tenant_;
    const command command_;
    const process_limits limits_;
    const std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();

    mutable std::mutex mutex_;  // exit_ and process_ for other threads
    std::optional<process_exit> exit_;
    launcher::exec_process process_;

    // On the strand:
    std::shared_ptr<boost::asio::posix::stream_descriptor> out_, err_, pty_, stdin_, exit_watch_;
    int open_streams_ = 0;
    std::optional<process_exit> pending_exit_;  // known, waiting for the pipes to drain
    std::unique_ptr<boost::asio::steady_timer> grace_;
    std::deque<std::pair<stream, std::string>> backlog_;
    std::size_t backlog_bytes_ = 0;
    std::deque<std::string> stdin_queue_;
    std::size_t stdin_queued_ = 0;
    bool stdin_writing_ = false, stdin_closing_ = false, finished_ = false;
    std::map<std::uint64_t, std::shared_ptr<watcher>> watchers_;
    std::uint64_t next_watcher_ = 1;
};

using process_ptr = std::shared_ptr<process>;

class process_table {
public:
    process_table(boost::asio::io_context& ioc, launcher::sandbox_launcher& launcher, process_limits limits = {});
    ~process_table();

    // Starts `c` in `k`'s sandbox. `done` gets the process, or the reason it
    // did not start and the HTTP status that fits (400 bad spec, 404 no
    // sandbox, 409 not running, 429 too many, 500).
    using started_fn = std::function<void(process_ptr, unsigned status, std::string why)>;
    void start(const kernels::kernel_ptr& k, command c, started_fn done);

    std::vector<process_ptr> list(const std::string& kernel_id) const;  // not the internal ones
    process_ptr find(const std::string& kernel_id, std::uint32_t pid) const;
    process_ptr find_tag(const std::string& kernel_id, const std::string& tag) const;
    // The session ended: its processes go with it.
    void remove_session(const std::string& kernel_id);
    void stop();  // every process ends (the gateway is shutting down)

    const process_limits& limits() const noexcept { return limits_; }
    // Prometheus: cellgate_process_starts_waiting, cellgate_process_starts_refused_total{why}.
    void render(std::string& out) const;
    boost::asio::io_context& io() noexcept { return ioc_; }

private:
    void forget_exited_locked(const std::string& kernel_id);

    boost::asio::io_context& ioc_;
    launcher::sandbox_launcher& launcher_;
    const process_limits limits_;
    util::file_io_pool exec_pool_;  // the launcher's execs, fair between tenants
    std::atomic<std::uint64_t> refused_tenant_{0}, refused_all_{0};
    mutable std::mutex mutex_;
    std::map<std::string, std::vector<process_ptr>> by_session_;
    std::map<std::string, std::uint32_t> next_pid_;
    std::size_t starting_ = 0;
};

}  // namespace cellgate::processes
