#pragma once

#include "agent/output_budget.hpp"
#include "agent/result_budget.hpp"
#include "agent/workspace_snapshot.hpp"
#include "kernels/kernel_manager.hpp"
#include "kernels/kernel_subscriber.hpp"
#include "util/file_io_pool.hpp"
#include "util/log_limiter.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <array>
#include <string>

namespace cellgate::agent {

struct execution_options {
    std::string code;
    std::chrono::milliseconds timeout{300000};        // 0: none
    std::size_t output_limit_bytes = 1u << 20;        // stdout + stderr
    std::size_t result_limit_bytes = 32u << 20;       // rich results, see result_budget.hpp
    std::size_t max_results = 10000;
    bool inline_files = false;                        // one-shot: file contents in the result
    std::size_t inline_files_limit_bytes = 32u << 20;
    util::file_io_pool* file_io = nullptr;            // where the workspace snapshots run (the strand when null)
    bool report_files = true;                         // snapshot the workspace to report changed files
    // An output budget (0: none): the result's text keeps head and tail
    // within it (output_budget.hpp), DataFrames become summaries, images
    // past max_image_pixels are downscaled, and the whole stdout and stderr
    // (up to spool_limit_bytes) go to files in spool_dir, which the surface
    // serves ("output_kept" in the result's budget).
    std::size_t budget_bytes = 0;
    std::uint64_t max_image_pixels = 1u << 20;
    std::filesystem::path spool_dir;
    std::size_t spool_limit_bytes = 32u << 20;
    // How the surface names where a cut stream can be read whole (the
    // execution's id, "stdout" or "stderr"): the cut text says so. Unset or
    // empty: the text says only that it was cut. The result itself names no
    // URL: files carry their paths, a downscaled image its index
    // (metadata.cellgate.original), the budget whether the output was kept.
    std::function<std::string(const std::string& execution_id, std::string_view stream)> output_at;
    // Environment for this cell only: set in the kernel's os.environ just
    // before it runs and put back as it was right after (names checked by
    // check_cell_env).
    std::map<std::string, std::string> env;
    // The door the cell came through ("v1", "mcp", "e2b"): its ledger record says so.
    std::string surface = "v1";
};

// Names and values for a cell's environment: a name is non-empty and holds
// no '=' or NUL, a value no NUL; at most 256 of them and 256 KiB in all.
// Returns what is wrong, or "" when nothing is.
std::string check_cell_env(const std::map<std::string, std::string>& env);

// One cell run for the agent API: sends execute_request on the gateway's own
// channel set and collects what the kernel publishes for it into one result
// (status, stdout, stderr, rich results, error, changed files, timing), with
// an optional live event for each piece (for Server-Sent Events). Runs on its
// own strand; the kernel only posts to it.
//
// Output past the caps never reaches the strand: deliver() (on the kernel's
// thread) reads only the few members it needs from each message's raw text,
// admits stream text and rich results against the caps there, and queues
// copies of the kept parts, not the messages. So a flood costs the gateway
// the caps and a scan, however much the kernel sends; the messages that end
// an execution (execute_reply, status) are tiny once read and always pass.
class execution : public kernels::kernel_subscriber, public std::enable_shared_from_this<execution> {
public:
    using event_fn = std::function<void(const std::string& event, const nlohmann::json& data)>;
    using done_fn = std::function<void(nlohmann::json result)>;

    execution(boost::asio::io_context& ioc, kernels::kernel_manager& manager, kernels::kernel_ptr k,
              execution_options options, event_fn on_event, done_fn on_done);

    ~execution() override;
    void start();
    // This execution's id in the ledger (a UUID), set at construction.
    const std::string& id() const noexcept { return id_; }
    // The client went away: interrupt the cell (the result is discarded).
    void cancel();
    bool finished() const noexcept { return finished_; }

    void deliver(messaging::kernel_message_ptr m) override;
    void kernel_closed(const std::string& reason) override;

private:
    struct kept_result;

    void on_stream(bool to_stderr, const std::string& raw_text);
    void on_result(const std::string& type, kept_result r);
    void on_error(const messaging::kernel_message& m);
    void on_reply(const std::string& status, const std::string& raw_execution_count);
    void on_idle();
    void on_kernel_dead(const std::string& reason);
    void on_timeout();
    void append_text(const std::string& stream, const std::string& text);
    void maybe_finish();
    void send_request();
    void finish();
    void complete(nlohmann::json files, std::optional<launcher::sandbox_usage> after);
    // Budget mode: the text cut to the budget, summaries, downscaled images.
    void apply_budget(nlohmann::json& result);
    void downscale_images(std::function<void()> then);
    void spool(int stream, std::string_view text);
    nlohmann::json usage_record(const std::string& status, const nlohmann::json& files,
                                const std::optional<launcher::sandbox_usage>& after) const;
    // Runs `work` on the file-I/O pool (at once, here, without one); false when the pool refused it.
    bool on_file_pool(std::function<void()> work);
    std::optional<workspace_snapshot> take_snapshot() const;
    nlohmann::json collect_files();
    void emit(const std::string& event, const nlohmann::json& data);

    boost::asio::strand<boost::asio::io_context::executor_type> strand_;
    kernels::kernel_manager& manager_;
    kernels::kernel_ptr kernel_;
    execution_options options_;
    event_fn on_event_;
    done_fn on_done_;
    boost::asio::steady_timer timer_;

    std::string msg_id_;  // set before the first deliver(), constant after

    // Admission, on the kernel's thread; finish() reads the drop flags.
    struct admission {
        std::size_t text_bytes = 0;
        bool stdout_dropped = false, stderr_dropped = false;
        results_budget results;
        std::size_t errors = 0, errors_dropped = 0;  // error messages admitted, and past the cap
        messaging::kernel_message_ptr newest_error;        // the newest one past the cap
    };
    std::mutex admission_mutex_;
    admission admission_;
    std::atomic<bool> done_{false};                // finished: deliver() drops everything
    std::atomic<std::size_t> pending_error_bytes_{0};  // error messages queued, not yet handled
    util::log_limiter error_drops_{3, std::chrono::seconds(10)};  // the kernel sets the pace (M6)

    std::optional<workspace_snapshot> before_;
    std::string id_;
    std::optional<launcher::sandbox_usage> usage_before_;  // at busy (the peak reset then)
    std::chrono::system_clock::time_point started_wall_;
    nlohmann::json deleted_ = nlohmann::json::array();  // files gone during the cell (collect_files)
    // Budget mode (strand only): stdout [0] and stderr [1] as captured and spooled.
    std::array<text_capture, 2> captures_;
    std::array<int, 2> spool_fds_{-1, -1};
    std::array<std::uint64_t, 2> spooled_{0, 0}, emitted_{0, 0};
    bool spool_failed_ = false;
    std::size_t images_downscaled_ = 0;
    std::chrono::steady_clock::time_point started_;
    std::string stdout_, stderr_;
    std::size_t text_bytes_ = 0;
    bool stdout_truncated_ = false, stderr_truncated_ = false, results_truncated_ = false;
    nlohmann::json results_ = nlohmann::json::array();
    nlohmann::json error_ = nullptr;
    std::string reply_status_;
    nlohmann::json execution_count_ = nullptr;
    bool replied_ = false, idle_ = false, timed_out_ = false, kernel_died_ = false, kernel_restarted_ = false;
    bool settling_ = false;  // replied and idle, waiting out the kernel's output_settle
    bool finished_ = false, cancelled_ = false, files_truncated_ = false;
};

}  // namespace cellgate::agent
