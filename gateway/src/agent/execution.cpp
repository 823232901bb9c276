#include "agent/execution.hpp"

#include "kernels/cell_notices.hpp"

#include "cellgate/protocol/message.hpp"
#include "util/encoding.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <algorithm>
#include <tuple>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace cellgate::agent {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

namespace peek = messaging::json_peek;

// Error messages waiting for the strand; past this a hostile kernel's flood
// of errors (each with a traceback of megabytes) is dropped on arrival.
constexpr std::size_t max_pending_error_bytes = 16u << 20;
// A cell raises one error (a few with IPython's showtraceback in a loop).
// Past this many, only the newest is kept, unparsed, and becomes the cell's
// error at the end: no stream carries an unbounded number of them.
constexpr std::size_t max_errors_per_execution = 16;

// The unescaped string in a raw JSON value, or "" when it is not a string.
std::string string_value(std::string_view raw) {
    if (raw.size() < 2 || raw.front() != '"') return {};
    const auto v = json::parse(raw, nullptr, false);
    return v.is_string() ? v.get<std::string>() : std::string();
}

// A raw JSON value parsed, or null (the kernel's JSON was validated on arrival).
json parse_value(std::string_view raw, json fallback = nullptr) {
    if (raw.empty()) return fallback;
    auto v = json::parse(raw, nullptr, false);
    return v.is_discarded() ? fallback : v;
}

}  // namespace

// A rich result's kept parts, copied out of its message (raw JSON).
struct execution::kept_result {
    std::array<std::string, kept_mime_types.size()> data;
    std::string metadata, execution_count;
};

execution::execution(asio::io_context& ioc, kernels::kernel_manager& manager, kernels::kernel_ptr k,
                     execution_options options, event_fn on_event, done_fn on_done)
    : strand_(asio::make_strand(ioc)), manager_(manager), kernel_(std::move(k)), options_(std::move(options)),
      on_event_(std::move(on_event)), on_done_(std::move(on_done)), timer_(strand_),
      admission_{0, false, false, results_budget(options_.result_limit_bytes, options_.max_results), 0, 0, nullptr},
      id_(protocol::make_uuid()) {
    if (options_.budget_bytes > 0) {
        // The whole output goes to the spool; memory keeps what the budget can show.
        options_.output_limit_bytes = std::max(options_.output_limit_bytes, options_.spool_limit_bytes);
        captures_ = {text_capture(options_.budget_bytes), text_capture(options_.budget_bytes)};
    }
}

execution::~execution() {
    for (const int fd : spool_fds_)
        if (fd >= 0) ::close(fd);
}

std::string check_cell_env(const std::map<std::string, std::string>& env) {
    if (env.size() > 256) return "at most 256 environment variables per cell";
    std::size_t bytes = 0;
    for (const auto& [name, value] : env) {
        if (name.empty() || name.find_first_of(std::string_view("=\0", 2)) != std::string::npos)
            return "environment variable names must be non-empty, without '=' or NUL";
        if (value.find('\0') != std::string::npos) return "environment variable values must not hold NUL";
        bytes += name.size() + value.size();
    }
    if (bytes > (256u << 10)) return "the cell's environment is larger than 256 KiB";
    return {};
}

namespace {

// A Python string literal holding `text`: a JSON string is one.
std::string py_literal(const std::string& text) { return json(text).dump(); }

// Silent cells around a cell with its own environment. One expression each,
// so nothing is left in the user's namespace; the previous values wait on
// the os module until the cell is over.
std::string set_env_code(const std::map<std::string, std::string>& env) {
    return "(lambda os, new: (setattr(os, '_cellgate_saved_env', {k: os.environ.get(k) for k in new}), "
           "os.environ.update(new)))(__import__('os'), __import__('json').loads(" +
           py_literal(json(env).dump()) + "))";
}
constexpr const char* restore_env_code =
    "(lambda os: [os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v) "
    "for k, v in os.__dict__.pop('_cellgate_saved_env', {}).items()])(__import__('os'))";

}  // namespace

void execution::start() {
    asio::post(strand_, [self = shared_from_this()] {
        self->started_ = std::chrono::steady_clock::now();
        self->started_wall_ = std::chrono::system_clock::now();
        // The snapshot walks the workspace and the usage asks the launcher:
        // off the strand, which is an io thread. The memory peak is reset
        // before the cell is sent, so the cell's record sees its own peak.
        const bool queued = self->on_file_pool([self] {
            auto snap = self->options_.report_files ? self->take_snapshot() : std::nullopt;
            std::array<int, 2> fds{-1, -1};
            if (self->options_.budget_bytes > 0 && !self->options_.spool_dir.empty()) {
                std::error_code ec;
                std::filesystem::create_directories(self->options_.spool_dir, ec);
                for (int s = 0; s < 2; ++s)
                    fds[static_cast<std::size_t>(s)] =
                        ::open((self->options_.spool_dir / (self->id_ + (s == 0 ? ".stdout" : ".stderr"))).c_str(),
                               O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
            }
            auto usage = self->manager_.sandbox_usage(self->kernel_->id(), true);
            asio::post(self->strand_, [self, snap = std::move(snap), usage, fds]() mutable {
                self->spool_fds_ = fds;
                self->spool_failed_ = self->options_.budget_bytes > 0 && (fds[0] < 0 || fds[1] < 0);
                self->before_ = std::move(snap);
                self->usage_before_ = usage;
                self->started_ = std::chrono::steady_clock::now();
                self->send_request();
            });
        });
        if (!queued) {
            self->files_truncated_ = self->options_.report_files;  // no snapshot, so no changed files to report
            self->send_request();
        }
    });
}

bool execution::on_file_pool(std::function<void()> work) {
    if (options_.file_io == nullptr) {
        work();
        return true;
    }
    return options_.file_io->submit(kernel_->tenant(), std::move(work)) == util::file_io_pool::admission::accepted;
}

void execution::send_request() {
    if (finished_) return;  // the kernel went away while the snapshot was taken
    auto msg = protocol::make_message("execute_request",
                                      {{"code", options_.code},
                                       {"silent", false},
                                       {"store_history", true},
                                       {"user_expressions", json::object()},
                                       {"allow_stdin", false},
                                       // Executions are serialised here: there is never a queue
                                       // for an error to abort, and with stop_on_error ipykernel
                                       // would abort the next request if it came quickly.
                                       {"stop_on_error", false}},
                                      "cellgate-agent-" + kernel_->id());
    // Before the first deliver(): add_observer takes the kernel's lock,
    // under which every deliver() runs.
    msg_id_ = json::parse(msg.header).at("msg_id").get<std::string>();
    auto self = shared_from_this();
    kernel_->add_observer(self);
    kernel_->touch();
    // The kernel runs shell requests in order, and none of these stops on an
    // error: the restore runs after the cell however it ends.
    if (!options_.env.empty()) kernel_->run_silent(set_env_code(options_.env), [](const json&) {});
    kernel_->gateway_send(messaging::channel::shell, std::move(msg));
    if (!options_.env.empty()) kernel_->run_silent(restore_env_code, [](const json&) {});
    if (options_.timeout.count() == 0) return;  // the session's policy sets no time limit
    timer_.expires_after(options_.timeout);
    timer_.async_wait([self](const boost::system::error_code& ec) {
        if (!ec) self->on_timeout();
    });
}

void execution::cancel() {
    asio::post(strand_, [self = shared_from_this()] {
        if (self->finished_) return;
        self->cancelled_ = true;
        self->manager_.interrupt(self->kernel_, [](std::optional<kernels::failure>) {});
    });
}

void execution::deliver(messaging::kernel_message_ptr m) {
    // On the kernel's thread, under its lock: scans only, and nothing is
    // queued that the caps will not keep.
    if (done_.load(std::memory_order_relaxed)) return;
    const auto& type = m->fields.msg_type;
    const std::string_view content = m->msg.content;
    auto self = shared_from_this();
    if (m->fields.parent_msg_id.empty()) {
        // A status the gateway made up for the whole kernel: "dead" ends the execution.
        if (type == "status" && peek::string_member(content, "execution_state") == "dead") {
            auto reason = std::string(peek::string_member(content, "cellgate_reason").value_or(""));
            if (reason.size() > 1024) reason.resize(1024);
            asio::post(strand_, [self, reason = std::move(reason)] { self->on_kernel_dead(reason); });
        }
        return;
    }
    if (m->fields.parent_msg_id != msg_id_) return;
    if (type == "status") {
        if (peek::string_member(content, "execution_state") == "idle") asio::post(strand_, [self] { self->on_idle(); });
    } else if (type == "execute_reply") {
        auto count = peek::member(content, "execution_count").value_or(std::string_view{});
        if (count.size() > 32) count = {};  // a number, or it is not one
        asio::post(strand_, [self, status = peek::string_member(content, "status").value_or(""),
                             count = std::string(count)] { self->on_reply(status, count); });
    } else if (type == "stream") {
        const bool to_stderr = peek::string_member(content, "name") == "stderr";
        auto text = peek::member(content, "text").value_or(std::string_view{});
        if (text.size() < 2 || text.front() != '"') text = {};
        const auto bytes = text.empty() ? 0 : peek::decoded_size(text.substr(1, text.size() - 2)).value_or(0);
        {
            std::lock_guard lock(admission_mutex_);
            if (admission_.text_bytes > options_.output_limit_bytes) {
                // The strand has cut the text already: this stream lost some too.
                (to_stderr ? admission_.stderr_dropped : admission_.stdout_dropped) = true;
                return;
            }
            admission_.text_bytes += bytes;
        }
        asio::post(strand_, [self, to_stderr, text = std::string(text)] { self->on_stream(to_stderr, text); });
    } else if (type == "display_data" || type == "execute_result") {
        const auto parts = peek_result(content);
        {
            std::lock_guard lock(admission_mutex_);
            if (!admission_.results.admit(parts.cost_bytes)) return;
        }
        kept_result r;
        for (std::size_t i = 0; i < parts.data.size(); ++i) r.data[i] = parts.data[i];
        r.metadata = parts.metadata;
        r.execution_count = parts.execution_count;
        asio::post(strand_, [self, type, r = std::move(r)]() mutable { self->on_result(type, std::move(r)); });
    } else if (type == "error") {
        {
            std::lock_guard lock(admission_mutex_);
            if (admission_.errors >= max_errors_per_execution) {
                admission_.newest_error = std::move(m);
                ++admission_.errors_dropped;
                return;
            }
            ++admission_.errors;
        }
        const auto bytes = m->wire_bytes();
        if (pending_error_bytes_.fetch_add(bytes) + bytes > max_pending_error_bytes) {
            pending_error_bytes_ -= bytes;
            const auto d = error_drops_.note(util::log_limiter::clock::now());
            if (d.suppressed > 0)
                spdlog::warn("kernel {}: dropped {} more error messages in the last 10 s (too many waiting)",
                             kernel_->id(), d.suppressed);
            if (d.log)
                spdlog::warn("kernel {}: dropped an error message of {} bytes (too many waiting)", kernel_->id(), bytes);
            return;
        }
        asio::post(strand_, [self, m = std::move(m), bytes] {
            self->pending_error_bytes_ -= bytes;
            self->on_error(*m);
        });
    }
}

void execution::kernel_closed(const std::string& reason) {
    asio::post(strand_, [self = shared_from_this(), reason] {
        if (self->finished_) return;
        self->kernel_died_ = true;
        self->append_text("stderr", "[cellgate: " + reason + "]\n");
        self->finish();
    });
}

void execution::on_kernel_dead(const std::string& reason) {
    if (finished_ || timed_out_) return;
    kernel_died_ = true;
    append_text("stderr", "[cellgate: the kernel died during this execution" + (reason.empty() ? "" : " (" + reason + ")") +
                              "; it is being restarted]\n");
    // Why, where an agent looks first: the error of its cell.
    if (!error_.is_object())
        error_ = {{"ename", "KernelDied"},
                  {"evalue", reason.empty() ? "the kernel's process ended" : reason},
                  {"traceback", json::array()},
                  {"traceback_text", ""}};
    finish();
}

void execution::on_stream(bool to_stderr, const std::string& raw_text) {
    if (finished_) return;
    append_text(to_stderr ? "stderr" : "stdout", string_value(raw_text));
}

void execution::on_result(const std::string& type, kept_result kept) {
    if (finished_) return;
    json data = json::object();
    for (std::size_t i = 0; i < kept.data.size(); ++i)
        if (!kept.data[i].empty()) data[std::string(kept_mime_types[i])] = parse_value(kept.data[i]);
    json r = {{"type", type},
              {"data", std::move(data)},
              {"metadata", parse_value(kept.metadata, json::object())},
              {"is_main_result", type == "execute_result"}};
    // With a budget, results are summarized and scaled at the end: they go
    // out with it, not live.
    const bool live = options_.budget_bytes == 0;
    if (type == "execute_result") {
        r["execution_count"] = parse_value(kept.execution_count);
        if (live) {
            auto shown = r["data"];
            shown.erase(std::string(table_mime_type));
            emit("result", {{"data", std::move(shown)}, {"metadata", r["metadata"]}, {"execution_count", r["execution_count"]}});
        }
    } else if (live) {
        auto shown = r["data"];
        shown.erase(std::string(table_mime_type));
        emit("display", {{"data", std::move(shown)}, {"metadata", r["metadata"]}});
    }
    results_.push_back(std::move(r));
}

void execution::on_error(const messaging::kernel_message& m) {
    if (finished_) return;
    const auto content = json::parse(m.msg.content, nullptr, false);
    if (!content.is_object()) return;
    auto text_member = [&content](const char* key) {
        const auto it = content.find(key);
        return it != content.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    json traceback = json::array();
    if (const auto it = content.find("traceback"); it != content.end() && it->is_array()) traceback = *it;
    std::string tb;
    for (const auto& line : traceback)
        if (line.is_string()) tb += line.get<std::string>() + "\n";
    error_ = {{"ename", text_member("ename")},
              {"evalue", text_member("evalue")},
              {"traceback", std::move(traceback)},
              {"traceback_text", strip_ansi(tb)}};
    emit("error", error_);
}

void execution::on_reply(const std::string& status, const std::string& raw_execution_count) {
    if (finished_) return;
    replied_ = true;
    reply_status_ = status;
    execution_count_ = parse_value(raw_execution_count);
    maybe_finish();
}

void execution::on_idle() {
    if (finished_) return;
    idle_ = true;
    maybe_finish();
}

void execution::append_text(const std::string& stream, const std::string& text) {
    auto& target = stream == "stderr" ? stderr_ : stdout_;
    auto& truncated = stream == "stderr" ? stderr_truncated_ : stdout_truncated_;
    if (stdout_truncated_ || stderr_truncated_) {
        truncated = true;  // the limit is shared and already reached: this stream lost text too
        return;
    }
    std::string piece = text;
    if (text_bytes_ + piece.size() > options_.output_limit_bytes) {
        piece.resize(options_.output_limit_bytes - text_bytes_);
        // Never cut a UTF-8 sequence in half.
        while (!piece.empty() && (static_cast<unsigned char>(piece.back()) & 0xc0) == 0x80) piece.pop_back();
        if (!piece.empty() && (static_cast<unsigned char>(piece.back()) & 0x80)) piece.pop_back();
        piece += kernels::cell_notices::output_truncated(options_.output_limit_bytes);
        truncated = true;
    }
    text_bytes_ += piece.size();
    if (options_.budget_bytes == 0) {
        target += piece;
        emit(stream, {{"text", piece}});
        return;
    }
    const std::size_t s = stream == "stderr" ? 1 : 0;
    captures_[s].append(piece);
    spool(static_cast<int>(s), piece);
    // Live events carry the first half of the budget of each stream; the end
    // result has head and tail.
    const std::size_t live = options_.budget_bytes / 2;
    if (emitted_[s] >= live) return;
    const auto room = static_cast<std::size_t>(live - emitted_[s]);
    std::string part = piece.size() <= room ? piece : piece.substr(0, utf8_complete_length(std::string_view(piece).substr(0, room)));
    emitted_[s] += piece.size() <= room ? piece.size() : room;
    if (piece.size() > room) part += "\n[cellgate: more output; the end result has its head and tail]\n";
    emit(stream, {{"text", part}});
}

void execution::spool(int stream, std::string_view text) {
    const auto s = static_cast<std::size_t>(stream);
    const int fd = spool_fds_[s];
    if (fd < 0 || spool_failed_) return;
    // Small writes to the page cache, on the strand: bounded by spool_limit_bytes.
    while (!text.empty()) {
        const auto n = ::pwrite(fd, text.data(), text.size(), static_cast<off_t>(spooled_[s]));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            spdlog::warn("kernel {}: spooling output failed: {}", kernel_->id(), std::strerror(errno));
            spool_failed_ = true;
            return;
        }
        spooled_[s] += static_cast<std::uint64_t>(n);
        text.remove_prefix(static_cast<std::size_t>(n));
    }
}

void execution::on_timeout() {
    if (finished_) return;
    timed_out_ = true;
    spdlog::info("kernel {}: execution {} timed out after {} ms; interrupting", kernel_->id(), msg_id_,
                 options_.timeout.count());
    append_text("stderr", kernels::cell_notices::time_limit(std::chrono::ceil<std::chrono::seconds>(options_.timeout)));
    manager_.interrupt(kernel_, [](std::optional<kernels::failure>) {});
    const auto grace = manager_.config().cell_interrupt_grace;
    timer_.expires_after(grace);
    timer_.async_wait([self = shared_from_this(), grace](const boost::system::error_code& ec) {
        if (ec || self->finished_) return;
        // Still not idle: the cell ignores SIGINT (or is stuck in C code). Kill and restart.
        spdlog::warn("kernel {}: not idle {} ms after the interrupt; restarting it", self->kernel_->id(),
                     std::chrono::duration_cast<std::chrono::milliseconds>(grace).count());
        self->append_text("stderr", kernels::cell_notices::not_stopped(
                                        std::chrono::duration_cast<std::chrono::milliseconds>(grace)));
        self->kernel_restarted_ = true;
        self->manager_.restart(self->kernel_, [self](std::optional<kernels::failure>) {
            asio::post(self->strand_, [self] { self->finish(); });
        });
    });
}

void execution::maybe_finish() {
    if (!replied_ || !idle_ || settling_) return;
    // A kernel whose outputs may come after its idle status (Deno's does:
    // an execute_result can follow it) gets its settle time before the
    // result is made; the observer keeps taking the cell's messages meanwhile.
    const auto* spec = manager_.specs().find(kernel_->spec_name());
    const auto settle = spec ? spec->output_settle : std::chrono::milliseconds(0);
    if (settle.count() == 0) return finish();
    settling_ = true;
    timer_.expires_after(settle);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec != boost::asio::error::operation_aborted) self->finish();
    });
}

void execution::finish() {
    if (finished_) return;
    messaging::kernel_message_ptr newest_error;
    {
        std::lock_guard lock(admission_mutex_);
        newest_error = std::move(admission_.newest_error);
        if (admission_.errors_dropped > 0)
            append_text("stderr", "[cellgate: " + std::to_string(admission_.errors_dropped) +
                                      " more error messages were dropped; the last one is this cell's error]\n");
    }
    if (newest_error) on_error(*newest_error);
    finished_ = true;
    done_ = true;
    timer_.cancel();
    {
        std::lock_guard lock(admission_mutex_);
        stdout_truncated_ = stdout_truncated_ || admission_.stdout_dropped;
        stderr_truncated_ = stderr_truncated_ || admission_.stderr_dropped;
        results_truncated_ = admission_.results.truncated();
    }
    auto self = shared_from_this();
    const bool queued = on_file_pool([self] {
        auto usage = self->usage_before_ ? self->manager_.sandbox_usage(self->kernel_->id(), false) : std::nullopt;
        auto files = self->collect_files();
        asio::post(self->strand_, [self, files = std::move(files), usage]() mutable {
            if (self->options_.budget_bytes == 0) return self->complete(std::move(files), usage);
            self->downscale_images([self, files = std::move(files), usage]() mutable { self->complete(std::move(files), usage); });
        });
    });
    if (!queued) {
        files_truncated_ = files_truncated_ || before_.has_value();
        complete(json::array(), std::nullopt);
    }
}

// The result, once the changed files are known (on the strand).
void execution::complete(json files, std::optional<launcher::sandbox_usage> after) {
    std::string status = "ok";
    if (kernel_died_) status = "kernel_died";
    else if (timed_out_) status = "timeout";
    else if (error_.is_object() && error_.value("ename", "") == "KeyboardInterrupt") status = "interrupted";
    else if (error_.is_object() || reply_status_ == "error") status = "error";
    else if (reply_status_ == "aborted") {
        status = "error";
        error_ = {{"ename", "Aborted"},
                  {"evalue", "the kernel aborted this request"},
                  {"traceback", json::array()},
                  {"traceback_text", ""}};
    }
    const bool files_complete = !files_truncated_;
    if (!files.empty()) emit("files", {{"files", files}});
    // IRkernel shows a visible value as display_data, never execute_result:
    // an R cell's last display is its result, as a Python cell's last
    // expression is.
    if (const auto* spec = manager_.specs().find(kernel_->spec_name());
        spec != nullptr && spec->language == "R" && status == "ok" && !results_.empty() &&
        std::none_of(results_.begin(), results_.end(), [](const json& r) { return r.value("is_main_result", false); }))
        results_.back()["is_main_result"] = true;
    auto usage = usage_record(status, files, after);  // before the output moves into the result
    json result = {{"status", status},
                   {"execution_count", execution_count_},
                   {"stdout", std::move(stdout_)},
                   {"stderr", std::move(stderr_)},
                   {"results", std::move(results_)},
                   {"error", error_},
                   {"files", files},
                   {"duration_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now() - started_)
                                       .count()},
                   {"truncated",
                    {{"stdout", stdout_truncated_},
                     {"stderr", stderr_truncated_},
                     {"results", results_truncated_},
                     {"files", !files_complete}}},
                   {"kernel_restarted", kernel_restarted_}};
    result["execution_id"] = id_;
    result["usage"] = std::move(usage);
    if (options_.budget_bytes > 0) apply_budget(result);
    else
        for (auto& r : result["results"]) r["data"].erase(std::string(table_mime_type));
    kernel_->touch();
    emit("end", result);
    // The event callback holds the client's stream (an SSE sink), which in
    // turn holds this execution until the client goes: drop it now, or the
    // pair keeps each other and the connection's socket alive for good.
    on_event_ = nullptr;
    if (on_done_) std::exchange(on_done_, nullptr)(std::move(result));
}

void execution::emit(const std::string& event, const json& data) {
    if (on_event_ && !cancelled_) on_event_(event, data);
}

}  // namespace cellgate::agent
