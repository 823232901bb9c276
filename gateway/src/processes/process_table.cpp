#include "processes/process_table.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <iterator>

namespace cellgate::processes {

namespace asio = boost::asio;
using descriptor = asio::posix::stream_descriptor;

std::string_view to_string(stream s) noexcept {
    switch (s) {
    case stream::stdout_: return "stdout";
    case stream::stderr_: return "stderr";
    case stream::pty: return "pty";
    }
    return "stdout";
}

process::process(asio::io_context& ioc, std::uint32_t pid, std::string kernel_id, std::string tenant, command c,
                 const process_limits& limits)
    : strand_(asio::make_strand(ioc)), pid_(pid), kernel_id_(std::move(kernel_id)), tenant_(std::move(tenant)),
      command_(std::move(c)), limits_(limits) {}

process::~process() = default;  // the exec handle, dropped, kills what still runs

std::optional<process_exit> process::exit() const {
    std::lock_guard lock(mutex_);
    return exit_;
}

void process::attach(launcher::exec_process p) {
    auto self = shared_from_this();
    auto wrap = [this](launcher::unique_fd fd) {
        return fd ? std::make_shared<descriptor>(strand_, fd.release()) : nullptr;
    };
    if (p.tty()) {
        pty_ = wrap(p.take_pty());
    } else {
        out_ = wrap(p.take_stdout());
        err_ = wrap(p.take_stderr());
        stdin_ = wrap(p.take_stdin());
    }
    // The handle keeps its exit descriptor; a duplicate is watched here.
    const int exit_fd = p.exit_fd() >= 0 ? ::fcntl(p.exit_fd(), F_DUPFD_CLOEXEC, 0) : -1;
    {
        std::lock_guard lock(mutex_);
        process_ = std::move(p);
    }
    asio::post(strand_, [this, self, exit_fd] {
        if (exit_fd >= 0) exit_watch_ = std::make_shared<descriptor>(strand_, exit_fd);
        for (auto [s, d] : {std::pair{stream::stdout_, out_}, {stream::stderr_, err_}, {stream::pty, pty_}})
            if (d) {
                ++open_streams_;
                read(s, d);
            }
        watch_exit();
    });
}

void process::read(stream s, std::shared_ptr<descriptor> d) {
    auto buf = std::make_shared<std::string>(64u << 10, '\0');
    d->async_read_some(asio::buffer(*buf), [self = shared_from_this(), s, d, buf](boost::system::error_code ec, std::size_t n) {
        if (n > 0) self->on_output(s, buf->substr(0, n));
        if (ec) return self->on_stream_closed();  // EOF; EIO from a PTY whose last holder closed it
        self->read(s, d);
    });
}

void process::watch_exit() {
    if (!exit_watch_) return;
    exit_watch_->async_wait(descriptor::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
        if (ec == asio::error::operation_aborted || self->finished_) return;
        std::optional<launcher::exec_exit> status;
        {
            std::lock_guard lock(self->mutex_);
            if (self->process_) status = self->process_.exit_status();
        }
        if (!status && !ec) return self->watch_exit();  // woken early: wait on
        process_exit e;
        if (status) {
            e.code = status->code;
            e.signal = status->signal;
            if (status->code < 0) e.error = "the sandbox ended while the process ran";
        } else {
            e.code = -1;
            e.error = "the process's state could not be read";
        }
        self->pending_exit_ = e;
        if (self->open_streams_ == 0) return self->finish();
        // Output written just before the exit may still be in the pipes.
        self->grace_ = std::make_unique<asio::steady_timer>(self->strand_, self->limits_.output_grace);
        self->grace_->async_wait([self](boost::system::error_code) { self->finish(); });
    });
}

void process::on_output(stream s, std::string bytes) {
    if (finished_) return;
    backlog_bytes_ += bytes.size();
    backlog_.emplace_back(s, bytes);
    while (backlog_bytes_ > limits_.backlog_bytes && backlog_.size() > 1) {
        backlog_bytes_ -= backlog_.front().second.size();
        backlog_.pop_front();
    }
    for (auto& [id, w] : watchers_) w->output(s, bytes);
}

void process::on_stream_closed() {
    if (--open_streams_ == 0 && pending_exit_) finish();
}

void process::finish() {
    if (finished_) return;
    finished_ = true;
    const auto e = pending_exit_.value_or(process_exit{-1, 0, "ended"});
    {
        std::lock_guard lock(mutex_);
        exit_ = e;
    }
    boost::system::error_code ignored;
    for (auto* d : {&out_, &err_, &pty_, &stdin_, &exit_watch_})
        if (*d) (*d)->close(ignored);  // a background child may hold the pipes: stop reading them
    if (grace_) grace_->cancel();
    auto watchers = std::move(watchers_);
    for (auto& [id, w] : watchers) w->exited(e);
}

std::uint64_t process::subscribe(std::shared_ptr<watcher> w) {
    std::uint64_t id = 0;
    {
        std::lock_guard lock(mutex_);
        id = next_watcher_++;
    }
    asio::post(strand_, [self = shared_from_this(), id, w = std::move(w)] {
        for (const auto& [s, bytes] : self->backlog_) w->output(s, bytes);
        if (self->finished_) {
            std::optional<process_exit> e;
            {
                std::lock_guard lock(self->mutex_);
                e = self->exit_;
            }
            return w->exited(e.value_or(process_exit{}));
        }
        self->watchers_[id] = w;
    });
    return id;
}

void process::unsubscribe(std::uint64_t id) {
    asio::post(strand_, [self = shared_from_this(), id] { self->watchers_.erase(id); });
}

bool process::write_stdin(std::string data, std::string& why) {
    if (data.size() > limits_.max_stdin_bytes) {
        why = "one write of input may hold at most " + std::to_string(limits_.max_stdin_bytes) + " bytes";
        return false;
    }
    if (!command_.spec.stdin_ && !command_.spec.tty) {
        why = "the process was started without stdin";
        return false;
    }
    if (!running()) {
        why = "the process has ended";
        return false;
    }
    asio::post(strand_, [self = shared_from_this(), data = std::move(data)]() mutable {
        if (self->stdin_closing_ || self->finished_) return;
        if (self->stdin_queued_ + data.size() > 4 * self->limits_.max_stdin_bytes) return;  // a reader that never reads
        self->stdin_queued_ += data.size();
        self->stdin_queue_.push_back(std::move(data));
        self->pump_stdin();
    });
    return true;
}

void process::pump_stdin() {
    auto& d = pty_ ? pty_ : stdin_;
    if (stdin_writing_ || !d) return;
    if (stdin_queue_.empty()) {
        if (stdin_closing_ && stdin_) {
            boost::system::error_code ignored;
            stdin_->close(ignored);  // EOF for the process
            stdin_.reset();
        }
        return;
    }
    stdin_writing_ = true;
    auto chunk = std::make_shared<std::string>(std::move(stdin_queue_.front()));
    stdin_queue_.pop_front();
    asio::async_write(*d, asio::buffer(*chunk), [self = shared_from_this(), chunk](boost::system::error_code ec, std::size_t) {
        self->stdin_writing_ = false;
        self->stdin_queued_ -= chunk->size();
        if (ec) {
            self->stdin_queue_.clear();
            self->stdin_queued_ = 0;
            return;
        }
        self->pump_stdin();
    });
}

void process::close_stdin() {
    asio::post(strand_, [self = shared_from_this()] {
        if (self->pty_) {
            // A terminal has no separate stdin: end-of-file is ^D.
            self->stdin_queue_.push_back(std::string(1, '\x04'));
            self->stdin_queued_ += 1;
        } else {
            self->stdin_closing_ = true;
        }
        self->pump_stdin();
    });
}

void process::signal(int sig) {
    std::lock_guard lock(mutex_);
    if (process_ && !exit_) process_.signal(sig);
}

void process::resize(std::uint16_t rows, std::uint16_t cols) {
    asio::post(strand_, [self = shared_from_this(), rows, cols] {
        if (self->pty_ && !self->finished_) launcher::set_pty_size(self->pty_->native_handle(), rows, cols);
    });
}

void process::kill() {
    std::lock_guard lock(mutex_);
    if (process_) process_.signal(SIGKILL);
}

process_table::process_table(asio::io_context& ioc, launcher::sandbox_launcher& launcher, process_limits limits)
    : ioc_(ioc), launcher_(launcher), limits_(limits),
      exec_pool_(util::file_io_pool::options{.threads = limits.start_threads,
                                             .per_tenant_running = limits.starts_per_tenant,
                                             .per_tenant_queued = limits.queued_starts_per_tenant,
                                             .max_queued = limits.total}) {}

process_table::~process_table() { stop(); }

namespace {

// What every command, terminal and context in a sandbox finds in its
// environment unless the caller set it: pip's user installs into the
// workspace (as in the kernel: cellgate-kernel), and, in a sandbox with a
// network, the way out through the egress forwarder and the CA bundle the
// kernel's entry point made (docs/egress.md).
void add_sandbox_defaults(const kernels::kernel& k, std::map<std::string, std::string>& env) {
    const auto set = [&env](const char* name, const std::string& value) { env.try_emplace(name, value); };
    set("PYTHONUSERBASE", "/workspace/.local");
    set("PIP_USER", "1");
    set("PIP_BREAK_SYSTEM_PACKAGES", "1");
    set("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    if (!k.policy().network) return;
    for (const char* name : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) set(name, "http://127.0.0.1:3128");
    for (const char* name : {"NO_PROXY", "no_proxy"}) set(name, "localhost,127.0.0.1,::1");
    for (const char* name : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT"})
        set(name, "/tmp/.cellgate-ca-bundle.pem");
    set("NODE_EXTRA_CA_CERTS", "/run/egress/ca.pem");
    set("PIP_CONFIG_FILE", "/run/egress/pip.conf");  // pip skips it when the operator named no index
}

}  // namespace

void process_table::start(const kernels::kernel_ptr& k, command c, started_fn done) {
    add_sandbox_defaults(*k, c.spec.env);
    const auto sandbox = k->sandbox();
    if (!sandbox || k->state() == kernels::kernel_state::dead)
        return done(nullptr, 409, "The session's sandbox is not running (restarting or dead); try again shortly");
    try {
        launcher::validate_exec_spec(c.spec);
    } catch (const launcher::spec_error& e) {
        return done(nullptr, 400, e.what());
    }
    std::uint32_t pid = 0;
    {
        std::lock_guard lock(mutex_);
        forget_exited_locked(k->id());
        std::size_t total = starting_;
        for (const auto& [id, list] : by_session_) total += list.size();
        if (by_session_[k->id()].size() >= limits_.per_session)
            return done(nullptr, 429, "The session runs " + std::to_string(limits_.per_session) +
                                          " processes already; wait for one to end or kill one");
        if (total >= limits_.total) return done(nullptr, 503, "The gateway runs as many processes as it may; try again later");
        ++starting_;
        pid = ++next_pid_[k->id()];
    }
    auto p = std::make_shared<process>(ioc_, pid, k->id(), k->tenant(), std::move(c), limits_);
    auto start = [this, p, sandbox_id = sandbox->id, done] {
        unsigned status = 0;
        std::string why;
        try {
            p->attach(launcher_.exec(sandbox_id, p->config().spec));
        } catch (const launcher::spec_error& e) {
            status = 400, why = e.what();
        } catch (const launcher::launch_error& e) {
            status = e.error_number() == ESRCH ? 409 : e.error_number() == EAGAIN ? 429 : 500;
            why = e.what();
            if (status == 500 && (why.find("chdir") != std::string::npos || why.find("cwd") != std::string::npos)) {
                spdlog::info("kernel {}: a process did not start: {}", p->kernel_id(), why);
                status = 400;  // the runtime's own words stay in the log
                why = "The working directory '" + p->config().spec.cwd.substr(0, 200) +
                      "' does not exist in the sandbox, or is not a directory";
            }
        } catch (const std::exception& e) {
            status = 500, why = e.what();
        }
        {
            std::lock_guard lock(mutex_);
            --starting_;
            if (status == 0) by_session_[p->kernel_id()].push_back(p);
        }
        if (status != 0) {
            spdlog::info("kernel {}: a process did not start: {}", p->kernel_id(), why);
            return done(nullptr, status, why);
        }
        done(p, 0, {});
    };
    const auto admitted = exec_pool_.submit(k->tenant(), std::move(start));
    if (admitted == util::file_io_pool::admission::accepted) return;
    {
        std::lock_guard lock(mutex_);
        --starting_;
    }
    if (admitted == util::file_io_pool::admission::tenant_busy) {
        ++refused_tenant_;
        return done(nullptr, 429, "Your sessions have " + std::to_string(limits_.queued_starts_per_tenant) +
                                      " process starts waiting already; try again shortly");
    }
    ++refused_all_;
    done(nullptr, 503, "The gateway has too many process starts waiting; try again shortly");
}

void process_table::render(std::string& out) const {
    out += "# HELP cellgate_process_starts_waiting Process starts (commands, terminals, E2B processes and contexts) "
           "queued or running.\n# TYPE cellgate_process_starts_waiting gauge\ncellgate_process_starts_waiting " +
           std::to_string(exec_pool_.queued()) + "\n";
    out += "# HELP cellgate_process_starts_refused_total Process starts refused: the tenant's queue was full, or "
           "everyone's.\n# TYPE cellgate_process_starts_refused_total counter\n"
           "cellgate_process_starts_refused_total{why=\"tenant\"} " + std::to_string(refused_tenant_.load()) +
           "\ncellgate_process_starts_refused_total{why=\"all\"} " + std::to_string(refused_all_.load()) + "\n";
    out += "# HELP cellgate_process_starts_per_tenant_limit --max-process-starts-per-tenant.\n"
           "# TYPE cellgate_process_starts_per_tenant_limit gauge\ncellgate_process_starts_per_tenant_limit " +
           std::to_string(limits_.starts_per_tenant) + "\n";
}

void process_table::forget_exited_locked(const std::string& kernel_id) {
    auto it = by_session_.find(kernel_id);
    if (it == by_session_.end()) return;
    // Ended processes stay listed for a while (a client reads their exit), up to
    // the session's bound.
    auto& list = it->second;
    while (list.size() >= limits_.per_session) {
        const auto ended = std::find_if(list.begin(), list.end(), [](const auto& p) { return !p->running(); });
        if (ended == list.end()) break;
        list.erase(ended);
    }
}

std::vector<process_ptr> process_table::list(const std::string& kernel_id) const {
    std::lock_guard lock(mutex_);
    std::vector<process_ptr> out;
    if (const auto it = by_session_.find(kernel_id); it != by_session_.end())
        std::copy_if(it->second.begin(), it->second.end(), std::back_inserter(out),
                     [](const process_ptr& p) { return !p->config().internal; });
    return out;
}

process_ptr process_table::find(const std::string& kernel_id, std::uint32_t pid) const {
    for (auto& p : list(kernel_id))
        if (p->pid() == pid) return p;
    return nullptr;
}

process_ptr process_table::find_tag(const std::string& kernel_id, const std::string& tag) const {
    for (auto& p : list(kernel_id))
        if (!tag.empty() && p->config().tag == tag && p->running()) return p;
    return nullptr;
}

void process_table::remove_session(const std::string& kernel_id) {
    std::vector<process_ptr> gone;
    {
        std::lock_guard lock(mutex_);
        if (const auto it = by_session_.find(kernel_id); it != by_session_.end()) {
            gone = std::move(it->second);
            by_session_.erase(it);
        }
        next_pid_.erase(kernel_id);
    }
    for (auto& p : gone) p->kill();
}

void process_table::stop() {
    std::map<std::string, std::vector<process_ptr>> all;
    {
        std::lock_guard lock(mutex_);
        all.swap(by_session_);
    }
    for (auto& [id, list] : all)
        for (auto& p : list) p->kill();
    exec_pool_.stop();
}

}  // namespace cellgate::processes
