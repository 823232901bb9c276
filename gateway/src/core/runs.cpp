#include "core/runs.hpp"

#include "core/files.hpp"
#include "util/api_error.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstring>

namespace cellgate::core {

std::string_view to_string(stage_kind s) noexcept { return s == stage_kind::compile ? "compile" : "run"; }

namespace {

using clock = std::chrono::steady_clock;

unsigned failure_status(kernels::failure_kind k) {
    using kernels::failure_kind;
    switch (k) {
    case failure_kind::no_such_spec:
    case failure_kind::no_such_kernel: return 404;
    case failure_kind::invalid: return 400;
    case failure_kind::over_quota: return 429;
    case failure_kind::unavailable: return 503;
    default: return 500;
    }
}

// The limits a stage's shell sets before its script: CPU seconds (whole,
// rounded up), address space, file size and open files, as Piston's prlimit.
std::string prelude(const stage_limits& l) {
    const auto cpu_s = std::max<std::int64_t>(1, (l.cpu.count() + 999) / 1000);
    std::string s = "ulimit -t " + std::to_string(cpu_s) + " -f 20480 -n 2048";
    if (l.memory >= 0) s += " -v " + std::to_string(std::max<std::int64_t>(1, l.memory / 1024));
    return s + " || exit 125\n";
}

}  // namespace

// One run: admission, its sandbox, its stages, its end. Every step after the
// sandbox starts runs under `mutex_`; the observer is called outside it.
class runs::job : public std::enable_shared_from_this<runs::job>, public run_handle {
public:
    job(runs& owner, run_request r, std::shared_ptr<run_observer> observer)
        : owner_(owner), r_(std::move(r)), observer_(std::move(observer)),
          timer_(owner.processes_.io()) {}

    const std::string& tenant() const noexcept { return r_.tenant; }

    // Not admitted: its tenant's queue is full.
    void refuse(std::string why, std::chrono::seconds retry_after) {
        failed_ = true;
        observer_->failed(429, std::move(why), retry_after);
    }

    void launch() {
        observer_->admitted();
        auto ask = session_for(r_.tenant);
        ask.kernelspec = r_.rt.kernelspec;
        ask.env = r_.env;
        ask.limits.idle_timeout = std::chrono::seconds(0);  // it ends with the run
        auto self = shared_from_this();
        try {
            owner_.core_.start(ask, [self](std::optional<kernels::failure> f, kernels::kernel_ptr k) {
                if (f) return self->fail(failure_status(f->kind), f->message);
                self->started(std::move(k));
            });
        } catch (const api_exception& e) {
            fail(e.status(), e.what());
        }
    }

    // run_handle
    void write_stdin(std::string data) override {
        std::lock_guard lock(mutex_);
        if (stdin_closed_) return;
        if (process_ && stage_ == stage_kind::run) {
            std::string why;
            process_->write_stdin(std::move(data), why);
        } else {
            r_.stdin_data += data;
        }
    }
    void close_stdin() override {
        std::lock_guard lock(mutex_);
        stdin_closed_ = true;
        if (process_ && stage_ == stage_kind::run) process_->close_stdin();
    }
    void signal(int sig) override {
        std::lock_guard lock(mutex_);
        if (process_) process_->signal(sig);
        else pending_signal_ = sig;
    }
    void abandon() override {
        std::lock_guard lock(mutex_);
        abandoned_ = true;
        if (process_) process_->kill();
    }

private:
    class watch : public processes::watcher {
    public:
        explicit watch(std::shared_ptr<job> j) : j_(std::move(j)) {}
        void output(processes::stream s, const std::string& bytes) override { j_->output(s, bytes); }
        void exited(const processes::process_exit& e) override { j_->exited(e); }

    private:
        std::shared_ptr<job> j_;
    };

    void started(kernels::kernel_ptr k) {
        kernel_ = std::move(k);
        auto self = shared_from_this();
        submit([self] {
            try {
                auto store = open_files(self->kernel_);
                for (const auto& f : self->r_.files) {
                    const auto path = contents::contents_store::check_path(f.name);
                    if (path.empty()) throw api_exception(400, "A file needs a name inside the workspace");
                    guarded([&] {
                        store->make_parents(path);
                        return store->write(path, f.content);
                    });
                }
            } catch (const api_exception& e) {
                return self->fail(e.status(), std::string("A file could not be written: ") + e.what());
            } catch (const std::exception& e) {
                return self->fail(500, std::string("A file could not be written: ") + e.what());
            }
            self->begin(self->r_.rt.compile.empty() ? stage_kind::run : stage_kind::compile);
        });
    }

    // On the file-I/O pool (the cgroup read blocks): the peak is reset, then the stage starts.
    void begin(stage_kind s) {
        {
            std::lock_guard lock(mutex_);
            if (abandoned_) return end_locked_then_done();
            stage_ = s;
        }
        before_ = owner_.core_.kernels().sandbox_usage(kernel_->id(), true);
        observer_->stage(s);
        const auto& l = s == stage_kind::compile ? r_.compile : r_.run;
        processes::command c;
        c.internal = true;
        c.spec.argv = {"/bin/bash", "-c", prelude(l) + (s == stage_kind::compile ? r_.rt.compile : r_.rt.run), "cellgate-run"};
        if (s == stage_kind::compile) {
            for (const auto& f : r_.files) c.spec.argv.push_back(f.name);
        } else {
            c.spec.argv.push_back(r_.files.front().name);
            for (const auto& a : r_.args) c.spec.argv.push_back(a);
        }
        c.spec.cwd = "/workspace";
        c.spec.env = {{"HOME", "/tmp"}, {"LANG", "C.UTF-8"}, {"PWD", "/workspace"}};
        c.spec.stdin_ = s == stage_kind::run;
        result_ = {};
        out_room_ = err_room_ = 0;
        killed_for_.clear();
        auto self = shared_from_this();
        owner_.processes_.start(kernel_, std::move(c), [self, l](processes::process_ptr p, unsigned status, std::string why) {
            if (!p) return self->fail(status == 429 || status == 503 ? status : 500, "The program could not start: " + why);
            std::unique_lock lock(self->mutex_);
            self->process_ = p;
            self->began_ = clock::now();
            if (self->stage_ == stage_kind::run) {
                std::string ignored;
                if (!self->r_.stdin_data.empty()) p->write_stdin(std::exchange(self->r_.stdin_data, {}), ignored);
                if (!self->r_.interactive || self->stdin_closed_) p->close_stdin();
                if (self->pending_signal_) p->signal(std::exchange(self->pending_signal_, 0));
            }
            if (self->abandoned_) p->kill();
            self->timer_.expires_after(l.wall);
            self->timer_.async_wait([self, p](boost::system::error_code ec) {
                if (ec) return;
                std::lock_guard held(self->mutex_);
                if (self->process_ != p || !p->running()) return;
                self->killed_for_ = "TO";
                p->kill();
            });
            lock.unlock();
            p->subscribe(std::make_shared<watch>(self));
        });
    }

    void output(processes::stream s, const std::string& bytes) {
        const bool err = s == processes::stream::stderr_;
        const auto& l = stage_ == stage_kind::compile ? r_.compile : r_.run;
        std::string piece;
        {
            std::lock_guard lock(mutex_);
            auto& used = err ? err_room_ : out_room_;
            auto& text = err ? result_.stderr_ : result_.stdout_;
            const auto room = l.output > used ? l.output - used : 0;
            piece = bytes.substr(0, room);
            used += piece.size();
            text += piece;
            result_.output += piece;
            if (bytes.size() > room && killed_for_.empty() && process_) {
                killed_for_ = err ? "EL" : "OL";
                process_->kill();
            }
        }
        if (!piece.empty()) observer_->data(stage_, err, piece);
    }

    void exited(const processes::process_exit& e) {
        timer_.cancel();
        const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - began_);
        auto self = shared_from_this();
        submit([self, e, wall] { self->stage_ended(e, wall); });
    }

    void stage_ended(const processes::process_exit& e, std::chrono::milliseconds wall) {
        const auto after = owner_.core_.kernels().sandbox_usage(kernel_->id(), false);
        const auto& l = stage_ == stage_kind::compile ? r_.compile : r_.run;
        stage_result res;
        {
            std::lock_guard lock(mutex_);
            process_.reset();
            res = std::move(result_);
            res.wall_ms = wall.count();
            if (before_ && after) {
                res.cpu_ms = static_cast<std::int64_t>((after->cpu_ns - std::min(after->cpu_ns, before_->cpu_ns)) / 1000000);
                res.memory = after->memory_peak_bytes > before_->memory_bytes ? after->memory_peak_bytes - before_->memory_bytes : 0;
            }
            if (!e.error.empty()) {
                res.status = "XX";
                res.message = "The sandbox ended while the program ran: " + e.error;
            } else if (e.signal != 0) {
                const char* abbrev = sigabbrev_np(e.signal);
                res.signal = abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(e.signal);
            } else {
                res.code = e.code;
            }
            const bool over_cpu = e.signal == SIGXCPU || (e.signal == SIGKILL && res.cpu_ms >= l.cpu.count());
            if (!res.status.empty()) {
            } else if (killed_for_ == "TO" || over_cpu) {
                res.status = "TO";
                res.message = killed_for_ == "TO" ? "Time limit exceeded (wall clock)" : "Time limit exceeded";
            } else if (killed_for_ == "OL") {
                res.status = "OL";
                res.message = "stdout length exceeded";
            } else if (killed_for_ == "EL") {
                res.status = "EL";
                res.message = "stderr length exceeded";
            } else if (e.signal != 0) {
                res.status = "SG";
                res.message = "Caught fatal signal " + std::to_string(e.signal);
            } else if (e.code != 0) {
                res.status = "RE";
                res.message = "Exited with error status " + std::to_string(e.code);
            }
        }
        observer_->stage_done(stage_, res);
        if (stage_ == stage_kind::compile) {
            const bool ok = res.status.empty() && res.code == 0;
            result_all_.compile = std::move(res);
            if (ok) return begin(stage_kind::run);
        } else {
            result_all_.run = std::move(res);
        }
        std::lock_guard lock(mutex_);
        end_locked_then_done();
    }

    // Ends the sandbox; the observer hears the result once it is gone.
    void end_locked_then_done() {
        if (ended_) return;
        ended_ = true;
        auto self = shared_from_this();
        auto k = kernel_;
        owner_.core_.kernels().shutdown(k, [self](std::optional<kernels::failure>) {
            self->owner_.finished(self->r_.tenant);
            if (!self->failed_) self->observer_->done(std::move(self->result_all_));
        }, "one-shot run finished");
    }

    void fail(unsigned status, std::string message) {
        {
            std::lock_guard lock(mutex_);
            if (failed_ || ended_) return;
            failed_ = true;
        }
        observer_->failed(status, std::move(message), std::nullopt);
        if (kernel_) {
            std::lock_guard lock(mutex_);
            if (process_) process_->kill();
            end_locked_then_done();
        } else {
            owner_.finished(r_.tenant);
        }
    }

    void submit(std::function<void()> work) {
        if (owner_.file_io_.submit(r_.tenant, std::move(work)) != util::file_io_pool::admission::accepted)
            fail(503, "The gateway is too busy to run this now; try again shortly");
    }

    runs& owner_;
    run_request r_;
    std::shared_ptr<run_observer> observer_;
    boost::asio::steady_timer timer_;
    std::mutex mutex_;
    kernels::kernel_ptr kernel_;
    processes::process_ptr process_;
    stage_kind stage_ = stage_kind::compile;
    std::optional<launcher::sandbox_usage> before_;
    clock::time_point began_{};
    stage_result result_;
    run_result result_all_;
    std::size_t out_room_ = 0, err_room_ = 0;
    std::string killed_for_;
    int pending_signal_ = 0;
    bool stdin_closed_ = false, abandoned_ = false, ended_ = false, failed_ = false;
};

runs::runs(sessions& core, processes::process_table& processes, util::file_io_pool& file_io, run_limits limits)
    : core_(core), processes_(processes), file_io_(file_io), limits_(limits) {}

runs::~runs() = default;

std::shared_ptr<run_handle> runs::start(run_request r, std::shared_ptr<run_observer> observer) {
    auto refuse = [&](std::string why) {
        observer->failed(400, std::move(why), std::nullopt);
        return nullptr;
    };
    if (r.files.empty()) return refuse("files must hold at least one file");
    if (r.files.size() > limits_.max_files) return refuse("at most " + std::to_string(limits_.max_files) + " files");
    std::size_t bytes = 0;
    for (const auto& f : r.files) bytes += f.content.size() + f.name.size();
    if (bytes > limits_.max_file_bytes)
        return refuse("the files hold more than " + std::to_string(limits_.max_file_bytes) + " bytes");
    if (r.stdin_data.size() > limits_.max_stdin_bytes)
        return refuse("stdin is longer than " + std::to_string(limits_.max_stdin_bytes) + " bytes");
    if (r.args.size() > limits_.max_args) return refuse("at most " + std::to_string(limits_.max_args) + " args");
    bool first = false;
    {
        std::lock_guard lock(mutex_);
        first = warm_ && warmed_.insert(r.rt.kernelspec).second;
    }
    if (first) warm_(r.rt.kernelspec);
    auto j = std::make_shared<job>(*this, std::move(r), std::move(observer));
    admit(j);
    return j;
}

void runs::admit(const std::shared_ptr<job>& j) {
    std::size_t ahead = 0;
    {
        std::lock_guard lock(mutex_);
        auto& q = tenants_[j->tenant()];
        if (q.running < limits_.running_per_tenant) {
            ++q.running;
        } else if (q.waiting.size() < limits_.queued_per_tenant) {
            q.waiting.push_back(j);
            return;
        } else {
            ++refused_;
            ahead = q.waiting.size() + q.running;
        }
    }
    if (ahead == 0) return j->launch();
    // A guess at when a place frees: a run takes about a second.
    const auto wait = std::chrono::seconds(1 + ahead / std::max<std::size_t>(1, limits_.running_per_tenant));
    j->refuse("The tenant's one-shot runs are all taken and " + std::to_string(limits_.queued_per_tenant) +
                  " more wait; try again in " + std::to_string(wait.count()) + " s",
              wait);
}

void runs::finished(const std::string& tenant) {
    std::shared_ptr<job> next;
    {
        std::lock_guard lock(mutex_);
        const auto it = tenants_.find(tenant);
        if (it == tenants_.end()) return;
        auto& q = it->second;
        if (!q.waiting.empty()) {
            next = std::move(q.waiting.front());
            q.waiting.pop_front();
        } else {
            if (q.running > 0) --q.running;
            if (q.running == 0) tenants_.erase(it);
        }
    }
    if (next) next->launch();
}

void runs::render(std::string& out) const {
    std::size_t running = 0, queued = 0;
    std::uint64_t refused = 0;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [tenant, q] : tenants_) running += q.running, queued += q.waiting.size();
        refused = refused_;
    }
    out += "# HELP cellgate_runs_running One-shot runs under way.\n# TYPE cellgate_runs_running gauge\n";
    out += "cellgate_runs_running " + std::to_string(running) + "\n";
    out += "# HELP cellgate_runs_queued One-shot runs waiting for their tenant's turn.\n# TYPE cellgate_runs_queued gauge\n";
    out += "cellgate_runs_queued " + std::to_string(queued) + "\n";
    out += "# HELP cellgate_runs_refused_total One-shot runs refused because their tenant's queue was full.\n";
    out += "# TYPE cellgate_runs_refused_total counter\ncellgate_runs_refused_total " + std::to_string(refused) + "\n";
}

}  // namespace cellgate::core
