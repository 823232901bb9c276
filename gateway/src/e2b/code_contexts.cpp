#include "e2b/code_contexts.hpp"

#include "http/http_types.hpp"
#include "kernels/cell_notices.hpp"
#include "util/encoding.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <deque>
#include <random>

namespace cellgate::e2b {

using nlohmann::json;
namespace asio = boost::asio;

namespace {

constexpr const char* context_program = "/opt/cellgate/cellgate-context";
constexpr const char* language_program = "/opt/cellgate/cellgate-kernel";  // --context LANGUAGE
constexpr std::size_t max_code_bytes = 2u << 20;        // one request line, written in pieces the table accepts
constexpr std::size_t max_message_bytes = 48u << 20;    // one line from the interpreter (a big plot, base64)
constexpr std::size_t max_idle_message_bytes = 64u << 10;  // one line while no cell runs ("ready")
constexpr std::size_t stderr_tail_bytes = 4096;         // kept to say why a start failed

std::string make_context_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string id(32, '0');
    for (auto& c : id) c = hex[rng() & 15];
    return id;
}

json error_data(const std::string& name, const std::string& value) {
    return {{"ename", name}, {"evalue", value}, {"traceback", json::array()}};
}

}  // namespace

using deferred = std::vector<std::function<void()>>;

// What every context's partial line holds, against one gateway-wide cap.
struct line_budget {
    explicit line_budget(std::size_t cap) : cap(cap) {}
    bool take(std::size_t n) {
        auto now = used.load();
        do {
            if (n > cap - now) return false;
        } while (!used.compare_exchange_weak(now, now + n));
        return true;
    }
    void give(std::size_t n) { used -= n; }

    const std::size_t cap;
    std::atomic<std::size_t> used{0};
};

struct cell {
    cell_request request;
    code_contexts::event_fn on_event;
    code_contexts::done_fn done;
    std::weak_ptr<context> owner;
    bool started = false, finished = false, timed_out = false;
    std::size_t output_bytes = 0, result_bytes = 0;
    bool output_dropped = false, result_dropped = false;
    json error = nullptr;
    std::unique_ptr<asio::steady_timer> timer;
    // For the ledger (kernels/cell_summary.hpp), through the session's kernel.
    std::weak_ptr<kernels::kernel> kernel;
    std::string id = make_context_id();
    std::chrono::steady_clock::time_point started_at;
    std::uint64_t stdout_bytes = 0, stderr_bytes = 0;
    std::size_t results = 0;
};

namespace {

// A context cell's start (no status) or end, to the session's ledger.
void report(const cell& c, const std::string& context_id, const std::string& status = {}) {
    const auto k = c.kernel.lock();
    if (!k) return;
    kernels::cell_summary s;
    s.id = c.id;
    s.surface = "e2b";
    s.context = context_id;
    s.started = c.started_at;
    if (!status.empty()) {
        s.ended = true;
        s.ended_at = std::chrono::steady_clock::now();
        s.code = c.request.code;
        s.code_bytes = c.request.code.size();
        s.error_name = c.error.is_object() ? c.error.value("ename", "") : "";
        s.status = status == "error" && s.error_name == "KeyboardInterrupt" ? "interrupted" : status;
        s.stdout_bytes = c.stdout_bytes;
        s.stderr_bytes = c.stderr_bytes;
        s.result_bytes = c.result_bytes;
        s.results = c.results;
        s.output_truncated = c.output_dropped;
        s.results_truncated = c.result_dropped;
        s.kernel_restarted = status == "kernel_died" || s.error_name == "KernelRestarted";
    }
    k->report_cell(std::move(s));
}

}  // namespace

class context : public std::enable_shared_from_this<context> {
public:
    enum class phase { starting, ready, dead };

    context(asio::io_context& io, std::shared_ptr<line_budget> budget, std::string kernel, context_info what,
            std::map<std::string, std::string> variables)
        : io_(io), budget_(std::move(budget)), kernel_id(std::move(kernel)), info(std::move(what)), env(std::move(variables)) {}
    ~context() { budget_->give(line_taken_); }

    asio::io_context& io_;
    const std::shared_ptr<line_budget> budget_;
    std::size_t line_taken_ = 0;  // of budget_, for `line`
    const std::string kernel_id;
    const context_info info;
    const std::map<std::string, std::string> env;

    std::mutex mutex;
    phase state = phase::dead;
    processes::process_ptr proc;
    std::uint64_t generation = 0;  // which process the watcher's calls are about
    std::string line, stderr_tail;
    bool discarding = false;   // inside a message over the size bound
    bool restarted = false;    // started afresh on a cell's demand: say so to that cell
    code_contexts::status_fn on_ready;
    std::unique_ptr<asio::steady_timer> start_timer;
    std::deque<std::shared_ptr<cell>> queue;  // the front one runs once started

    // The interpreter's output, on its process's strand.
    void output(std::uint64_t gen, processes::stream s, const std::string& bytes) {
        deferred later;
        {
            std::lock_guard lock(mutex);
            if (gen != generation) return;
            if (s == processes::stream::stderr_) on_stderr(bytes, later);
            else on_stdout(bytes, later);
        }
        for (auto& f : later) f();
    }

    void exited(std::uint64_t gen, const processes::process_exit& e) {
        deferred later;
        {
            std::lock_guard lock(mutex);
            if (gen != generation) return;
            state = phase::dead;
            proc.reset();
            drop_line();
            discarding = false;
            std::string why = e.signal ? "it was killed by signal " + std::to_string(e.signal)
                                       : "it exited with status " + std::to_string(e.code);
            if (!e.error.empty()) why = e.error;
            if (on_ready) {
                const auto tail = stderr_tail.empty() ? std::string() : ": " + stderr_tail;
                later.push_back([f = std::exchange(on_ready, nullptr), why, tail] {
                    f(500, "The context's interpreter ended before it was ready (" + why + ")" + tail);
                });
            }
            fail_all("DeadKernelError",
                     "The context's interpreter ended (" + why + "; out of memory?); its variables are lost. "
                     "The next cell starts it afresh.",
                     "kernel_died", later);
        }
        for (auto& f : later) f();
    }

    // Every queued or running cell ends with this error (under the lock).
    void fail_all(const std::string& name, const std::string& value, const std::string& status, deferred& later) {
        auto cells = std::exchange(queue, {});
        for (auto& c : cells) {
            if (c->finished) continue;
            c->finished = true;
            if (c->timer) c->timer->cancel();
            const bool timed_out = c->timed_out;
            later.push_back([c, name, value, status, timed_out, context_id = info.id] {
                if (!c->error.is_object()) {
                    c->error = timed_out ? error_data("TimeoutError", "The cell ran past its time limit and was interrupted")
                                         : error_data(name, value);
                    c->on_event("error", c->error);
                }
                c->done({{"status", timed_out ? "timeout" : status}, {"execution_count", nullptr}, {"error", c->error}});
                if (c->started) report(*c, context_id, timed_out ? "timeout" : status);
            });
        }
    }

    void on_stderr(const std::string& bytes, deferred& later) {
        if (!queue.empty() && queue.front()->started) return emit_text(*queue.front(), "stderr", bytes, later);
        stderr_tail += bytes;
        if (stderr_tail.size() > stderr_tail_bytes) stderr_tail.erase(0, stderr_tail.size() - stderr_tail_bytes);
    }

    void on_stdout(const std::string& bytes, deferred& later) {
        std::size_t from = 0;
        while (from < bytes.size()) {
            const auto nl = bytes.find('\n', from);
            const auto piece = std::string_view(bytes).substr(from, nl == std::string::npos ? std::string::npos : nl - from);
            const bool running = !queue.empty() && queue.front()->started;
            if (!discarding) {
                const auto limit = running ? max_message_bytes : max_idle_message_bytes;
                if (line.size() + piece.size() > limit || !budget_->take(piece.size())) {
                    discarding = true;
                    drop_line();
                    if (running) queue.front()->result_dropped = true;
                } else {
                    line_taken_ += piece.size();
                    line.append(piece);
                }
            }
            if (nl == std::string::npos) break;
            if (!discarding) {
                const auto text = std::exchange(line, {});
                budget_->give(std::exchange(line_taken_, 0));
                message(text, later);
            }
            discarding = false;
            from = nl + 1;
        }
    }

    // The partial line and its share of the budget, memory included.
    void drop_line() {
        std::string().swap(line);
        budget_->give(std::exchange(line_taken_, 0));
    }

    // As a /v1 execution cuts its text: what fits, then the notice, on the
    // stream that reached the limit; nothing after.
    void emit_text(cell& c, const std::string& name, const std::string& text, deferred& later) {
        (name == "stderr" ? c.stderr_bytes : c.stdout_bytes) += text.size();
        if (c.output_dropped) return;
        const auto limit = c.request.output_limit_bytes;
        std::string piece = text;
        if (limit != 0 && c.output_bytes + text.size() > limit) {
            piece.resize(utf8_complete_length(std::string_view(text).substr(0, limit - c.output_bytes)));
            piece += kernels::cell_notices::output_truncated(limit);
            c.output_dropped = true;
        }
        c.output_bytes += text.size();
        later.push_back([f = c.on_event, name, piece = std::move(piece)] { f(name, {{"text", piece}}); });
    }

    void message(const std::string& text, deferred& later) {
        if (!protocol::json_nesting_within(text, http::max_body_json_depth)) {
            spdlog::warn("e2b: context {} of {}: a message nested deeper than {} levels, dropped ({} bytes)", info.id,
                         kernel_id, http::max_body_json_depth, text.size());
            if (!queue.empty() && queue.front()->started) queue.front()->result_dropped = true;
            return;
        }
        const auto m = json::parse(text, nullptr, false);
        if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) {
            spdlog::warn("e2b: context {} of {}: a line that is not a message ({} bytes)", info.id, kernel_id, text.size());
            return;
        }
        const auto type = m["type"].get<std::string>();
        if (type == "ready") {
            state = phase::ready;
            stderr_tail.clear();
            if (start_timer) start_timer->cancel();
            if (on_ready) later.push_back([f = std::exchange(on_ready, nullptr)] { f(0, {}); });
            return pump(later);
        }
        if (queue.empty() || !queue.front()->started) return;  // nothing asked for it
        auto& c = *queue.front();
        if (type == "stdout" || type == "stderr") {
            if (m.contains("text") && m["text"].is_string()) emit_text(c, type, m["text"].get<std::string>(), later);
        } else if (type == "display" || type == "result") {
            auto data = m.value("data", json::object());
            c.result_bytes += text.size();
            ++c.results;
            if (c.result_bytes > c.request.result_limit_bytes) {
                c.result_dropped = true;
                return;
            }
            later.push_back([f = c.on_event, type, data = std::move(data)] { f(type, {{"data", data}}); });
        } else if (type == "error") {
            c.error = {{"ename", m.value("ename", "Error")}, {"evalue", m.value("evalue", "")},
                       {"traceback", m.value("traceback", json::array())}};
            later.push_back([f = c.on_event, e = c.error] { f("error", e); });
        } else if (type == "done") {
            finish(m.value("execution_count", json(nullptr)), later);
            pump(later);
        }
    }

    // The running cell's end (under the lock).
    void finish(json execution_count, deferred& later) {
        auto c = queue.front();
        queue.pop_front();
        c->finished = true;
        if (c->timer) c->timer->cancel();
        std::string note;
        if (c->result_dropped) note += kernels::cell_notices::results_dropped(c->request.result_limit_bytes);
        auto status = c->timed_out ? "timeout" : c->error.is_object() ? "error" : "ok";
        later.push_back([c, note, status, execution_count = std::move(execution_count), context_id = info.id] {
            if (!note.empty()) c->on_event("stderr", {{"text", note}});
            if (c->timed_out && !c->error.is_object()) {
                c->error = error_data("TimeoutError", "The cell ran past its time limit and was interrupted");
                c->on_event("error", c->error);
            }
            c->done({{"status", status}, {"execution_count", execution_count}, {"error", c->error}});
            report(*c, context_id, status);
        });
    }

    // Starts the next cell when the interpreter is free (under the lock).
    void pump(deferred& later) {
        if (state != phase::ready || queue.empty() || queue.front()->started || !proc) return;
        auto c = queue.front();
        c->started = true;
        c->started_at = std::chrono::steady_clock::now();
        later.push_back([c, context_id = info.id] { report(*c, context_id); });
        if (restarted) {
            restarted = false;
            later.push_back([c] {
                c->on_event("stderr", {{"text", "[cellgate: this context's interpreter had ended; it was started "
                                                 "afresh and its variables are gone]\n"}});
            });
        }
        const auto request = json{{"code", c->request.code}, {"env", c->request.env}}.dump(
                                 -1, ' ', false, json::error_handler_t::replace) + "\n";
        const std::size_t piece = 512u << 10;
        for (std::size_t at = 0; at < request.size(); at += piece) {
            std::string why;
            if (!proc->write_stdin(request.substr(at, piece), why))
                spdlog::warn("e2b: context {} of {}: a cell's code did not reach it: {}", info.id, kernel_id, why);
        }
        c->timer = std::make_unique<asio::steady_timer>(io_, c->request.timeout);
        c->timer->async_wait([self = shared_from_this(), c](boost::system::error_code ec) {
            if (ec) return;
            std::lock_guard lock(self->mutex);
            if (c->finished || !self->proc) return;
            c->timed_out = true;
            self->interrupt(c);
        });
    }

    // SIGINT now; the interpreter is killed if the cell has not ended soon after.
    void interrupt(const std::shared_ptr<cell>& c) {
        if (c->timed_out)
            asio::post(io_, [f = c->on_event, n = kernels::cell_notices::time_limit(c->request.timeout)] { f("stderr", {{"text", n}}); });
        proc->signal(SIGINT);
        c->timer = std::make_unique<asio::steady_timer>(io_, c->request.interrupt_grace);
        c->timer->async_wait([self = shared_from_this(), c](boost::system::error_code ec) {
            if (ec) return;
            std::lock_guard lock(self->mutex);
            if (!c->finished && self->proc) {
                spdlog::info("e2b: context {} of {}: a cell ignored its interrupt; killing the interpreter",
                             self->info.id, self->kernel_id);
                if (c->timed_out)
                    asio::post(self->io_, [f = c->on_event, n = kernels::cell_notices::not_stopped(c->request.interrupt_grace)] {
                        f("stderr", {{"text", n}});
                    });
                self->proc->kill();
            }
        });
    }
};

namespace {

class context_watcher : public processes::watcher {
public:
    context_watcher(std::weak_ptr<context> ctx, std::uint64_t generation) : ctx_(std::move(ctx)), generation_(generation) {}
    void output(processes::stream s, const std::string& bytes) override {
        if (auto c = ctx_.lock()) c->output(generation_, s, bytes);
    }
    void exited(const processes::process_exit& e) override {
        if (auto c = ctx_.lock()) c->exited(generation_, e);
    }

private:
    std::weak_ptr<context> ctx_;
    const std::uint64_t generation_;
};

}  // namespace

code_contexts::code_contexts(processes::process_table& table, context_limits limits)
    : table_(table), limits_(limits), lines_(std::make_shared<line_budget>(limits.partial_line_bytes)) {}

code_contexts::~code_contexts() {
    std::map<std::string, std::map<std::string, std::shared_ptr<context>>> all;
    {
        std::lock_guard lock(mutex_);
        all.swap(by_sandbox_);
    }
    for (auto& [k, contexts] : all)
        for (auto& [id, ctx] : contexts) {
            std::lock_guard lock(ctx->mutex);
            if (ctx->proc) ctx->proc->kill();
        }
}

void code_contexts::start(const kernels::kernel_ptr& k, const std::shared_ptr<context>& ctx, status_fn done) {
    processes::command c;
    if (ctx->info.language == "python") c.spec.argv = {"/usr/bin/python3", "-s", context_program};
    else c.spec.argv = {"/usr/bin/python3", "-I", language_program, "--context", ctx->info.language};
    c.spec.cwd = ctx->info.cwd;
    c.spec.env = ctx->env;
    c.spec.env["HOME"] = "/home/user";
    c.spec.env["USER"] = "user";
    c.spec.env["PWD"] = ctx->info.cwd;
    c.spec.env["PYTHONUNBUFFERED"] = "1";
    c.spec.stdin_ = true;
    c.tag = "context:" + ctx->info.id;
    c.internal = true;
    {
        std::lock_guard lock(ctx->mutex);
        ctx->state = context::phase::starting;
        ++ctx->generation;
    }
    table_.start(k, std::move(c), [this, ctx, done = std::move(done)](processes::process_ptr p, unsigned status, std::string why) {
        if (!p) {
            deferred later;
            {
                std::lock_guard lock(ctx->mutex);
                ctx->state = context::phase::dead;
                ctx->fail_all("ContextError", "The context's interpreter could not start: " + why, "error", later);
            }
            for (auto& f : later) f();
            return done(status, "The context's interpreter could not start: " + why);
        }
        std::uint64_t gen = 0;
        {
            std::lock_guard lock(ctx->mutex);
            gen = ctx->generation;
            ctx->proc = p;
            ctx->on_ready = done;
            ctx->start_timer = std::make_unique<asio::steady_timer>(table_.io(), limits_.start_timeout);
            ctx->start_timer->async_wait([ctx, gen](boost::system::error_code ec) {
                if (ec) return;
                std::lock_guard held(ctx->mutex);
                if (ctx->generation == gen && ctx->state == context::phase::starting && ctx->proc) ctx->proc->kill();
            });
        }
        p->subscribe(std::make_shared<context_watcher>(ctx, gen));
    });
}

std::shared_ptr<context> code_contexts::add_locked(const kernels::kernel_ptr& k, std::string language, std::string cwd,
                                                  std::map<std::string, std::string> env, std::string& why) {
    auto& mine = by_sandbox_[k->id()];
    if (mine.size() >= limits_.per_sandbox) {
        why = "The sandbox has " + std::to_string(limits_.per_sandbox) + " code contexts already; remove one first";
        return nullptr;
    }
    auto ctx = std::make_shared<context>(table_.io(), lines_, k->id(),
                                         context_info{make_context_id(), std::move(language), std::move(cwd)}, std::move(env));
    mine[ctx->info.id] = ctx;
    return ctx;
}

void code_contexts::create(const kernels::kernel_ptr& k, std::string language, std::string cwd,
                           std::map<std::string, std::string> env, created_fn done) {
    std::string why;
    std::shared_ptr<context> ctx;
    {
        std::lock_guard lock(mutex_);
        ctx = add_locked(k, std::move(language), std::move(cwd), std::move(env), why);
    }
    if (!ctx) return done(nullptr, 429, std::move(why));
    start(k, ctx, [this, ctx, done = std::move(done)](unsigned status, std::string why) {
        if (status != 0) {
            remove(ctx->kernel_id, ctx->info.id);
            return done(nullptr, status, std::move(why));
        }
        done(&ctx->info, 0, {});
    });
}

std::string code_contexts::for_language(const kernels::kernel_ptr& k, const std::string& language, std::string cwd,
                                       std::map<std::string, std::string> env, std::string& why) {
    std::shared_ptr<context> ctx;
    {
        std::lock_guard lock(mutex_);
        auto& defaults = by_language_[k->id()];
        if (const auto it = defaults.find(language); it != defaults.end()) {
            if (const auto mine = by_sandbox_.find(k->id()); mine != by_sandbox_.end() && mine->second.count(it->second) != 0)
                return it->second;
            defaults.erase(it);  // removed by its id: made afresh
        }
        ctx = add_locked(k, language, std::move(cwd), std::move(env), why);
        if (!ctx) return {};
        defaults[language] = ctx->info.id;
    }
    spdlog::info("e2b: sandbox {}: a {} context {} for cells that name the language", k->id(), language, ctx->info.id);
    // A start that fails fails the cells queued on it; the next cell starts it again.
    start(k, ctx, [](unsigned, std::string) {});
    return ctx->info.id;
}

std::shared_ptr<context> code_contexts::find(const std::string& kernel_id, const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = by_sandbox_.find(kernel_id);
    if (it == by_sandbox_.end()) return nullptr;
    const auto c = it->second.find(id);
    return c == it->second.end() ? nullptr : c->second;
}

std::vector<context_info> code_contexts::list(const std::string& kernel_id) const {
    std::lock_guard lock(mutex_);
    std::vector<context_info> out;
    if (const auto it = by_sandbox_.find(kernel_id); it != by_sandbox_.end())
        for (const auto& [id, ctx] : it->second) out.push_back(ctx->info);
    return out;
}

bool code_contexts::exists(const std::string& kernel_id, const std::string& id) const { return find(kernel_id, id) != nullptr; }

void code_contexts::restart(const kernels::kernel_ptr& k, const std::string& id, status_fn done) {
    const auto ctx = find(k->id(), id);
    if (!ctx) return done(404, "Context '" + id.substr(0, 64) + "' not found");
    deferred later;
    {
        std::lock_guard lock(ctx->mutex);
        ++ctx->generation;  // the old interpreter's last words are not this one's
        if (ctx->proc) ctx->proc->kill();
        ctx->proc.reset();
        ctx->state = context::phase::dead;
        if (ctx->on_ready) later.push_back([f = std::exchange(ctx->on_ready, nullptr)] { f(409, "The context was restarted"); });
        ctx->fail_all("KernelRestarted", "The context was restarted while the cell ran", "error", later);
    }
    for (auto& f : later) f();
    start(k, ctx, std::move(done));
}

bool code_contexts::remove(const std::string& kernel_id, const std::string& id) {
    std::shared_ptr<context> ctx;
    {
        std::lock_guard lock(mutex_);
        const auto it = by_sandbox_.find(kernel_id);
        if (it == by_sandbox_.end()) return false;
        const auto c = it->second.find(id);
        if (c == it->second.end()) return false;
        ctx = c->second;
        it->second.erase(c);
        if (it->second.empty()) by_sandbox_.erase(it);
        if (const auto d = by_language_.find(kernel_id); d != by_language_.end()) {
            std::erase_if(d->second, [&](const auto& entry) { return entry.second == id; });
            if (d->second.empty()) by_language_.erase(d);
        }
    }
    deferred later;
    {
        std::lock_guard lock(ctx->mutex);
        ++ctx->generation;
        if (ctx->proc) ctx->proc->kill();
        ctx->proc.reset();
        ctx->state = context::phase::dead;
        ctx->fail_all("ContextRemoved", "The context was removed while the cell ran", "error", later);
    }
    for (auto& f : later) f();
    return true;
}

std::shared_ptr<cell> code_contexts::execute(const kernels::kernel_ptr& k, const std::string& id, cell_request r,
                                             event_fn on_event, done_fn done, unsigned& status, std::string& why) {
    const auto ctx = find(k->id(), id);
    if (!ctx) {
        status = 404, why = "Context '" + id.substr(0, 64) + "' not found";
        return nullptr;
    }
    if (r.code.size() > max_code_bytes) {
        status = 413, why = "A cell's code may be at most " + std::to_string(max_code_bytes) + " bytes in a code context";
        return nullptr;
    }
    auto c = std::make_shared<cell>();
    c->request = std::move(r);
    c->on_event = std::move(on_event);
    c->done = std::move(done);
    c->owner = ctx;
    c->kernel = k;
    bool revive = false;
    {
        std::lock_guard lock(ctx->mutex);
        if (ctx->queue.size() >= limits_.queued_cells) {
            status = 429, why = "The context has " + std::to_string(limits_.queued_cells) + " cells waiting already";
            return nullptr;
        }
        ctx->queue.push_back(c);
        if (ctx->state == context::phase::dead) {
            revive = true;
            ctx->restarted = true;
        }
        deferred later;
        ctx->pump(later);
        for (auto& f : later) asio::post(table_.io(), std::move(f));  // never call back into the caller's frame
    }
    if (revive) {
        spdlog::info("e2b: context {} of {}: its interpreter had ended; starting it afresh", id, k->id());
        start(k, ctx, [](unsigned, std::string) {});
    }
    return c;
}

void code_contexts::cancel(const std::shared_ptr<cell>& c) {
    const auto ctx = c->owner.lock();
    if (!ctx) return;
    std::lock_guard lock(ctx->mutex);
    if (c->finished) return;
    if (!c->started) {
        std::erase(ctx->queue, c);
        c->finished = true;
        return;
    }
    if (ctx->proc) ctx->interrupt(c);
}

void code_contexts::remove_session(const std::string& kernel_id) {
    std::vector<std::string> ids;
    for (const auto& i : list(kernel_id)) ids.push_back(i.id);
    for (const auto& id : ids) remove(kernel_id, id);
    std::lock_guard lock(mutex_);
    by_language_.erase(kernel_id);
    if (const auto it = by_sandbox_.find(kernel_id); it != by_sandbox_.end() && it->second.empty()) by_sandbox_.erase(it);
}

}  // namespace cellgate::e2b
