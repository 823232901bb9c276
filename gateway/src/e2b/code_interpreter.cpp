// The code interpreter's port (49999): /execute as the SDK's NDJSON stream,
// over the same executions the /v1 API runs, and the code contexts.
#include "e2b/surface.hpp"

#include "kit/request_models.hpp"
#include "util/api_error.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace cellgate::e2b {

using namespace http;
using nlohmann::json;

namespace {

std::string line(json j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

std::string now_iso() { return kernels::iso8601(sys_clock::now()); }

// A MIME bundle as E2B's result: its own keys for the types it knows,
// "extra" for the rest.
json result_line(const json& data, bool is_main) {
    static const std::pair<const char*, const char*> keys[] = {
        {"text/plain", "text"},        {"text/html", "html"},          {"text/markdown", "markdown"},
        {"image/svg+xml", "svg"},      {"image/png", "png"},           {"image/jpeg", "jpeg"},
        {"application/pdf", "pdf"},    {"text/latex", "latex"},        {"application/json", "json"},
        {"application/javascript", "javascript"}, {"e2b/data", "data"}, {"e2b/chart", "chart"}};
    json out = {{"type", "result"}, {"is_main_result", is_main}};
    json extra = json::object();
    if (data.is_object())
        for (const auto& [mime, value] : data.items()) {
            const char* key = nullptr;
            for (const auto& [m, k] : keys)
                if (mime == m) key = k;
            if (key == nullptr) {
                extra[mime] = value;
                continue;
            }
            auto v = value;
            if (std::string_view(key) == "text" && v.is_string()) {
                // As E2B's server: one pair of surrounding quotes goes.
                auto t = v.get<std::string>();
                if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"') && t.back() == t.front())
                    t = t.substr(1, t.size() - 2);
                v = t;
            }
            out[key] = std::move(v);
        }
    if (!extra.empty()) out["extra"] = std::move(extra);
    return out;
}

std::string joined(const json& traceback) {
    std::string out;
    if (traceback.is_array())
        for (const auto& l : traceback)
            if (l.is_string()) out += (out.empty() ? "" : "\n") + l.get<std::string>();
    return out;
}

// One execution's events as the SDK's lines.
void encode(const std::string& event, const json& data, stream_sink& sink) {
    if (event == "stdout" || event == "stderr")
        sink.write(line({{"type", event}, {"text", data.value("text", "")}, {"timestamp", now_iso()}}));
    else if (event == "result") sink.write(line(result_line(data.value("data", json::object()), true)));
    else if (event == "display") sink.write(line(result_line(data.value("data", json::object()), false)));
    else if (event == "error")
        sink.write(line({{"type", "error"},
                         {"name", data.value("ename", "")},
                         {"value", data.value("evalue", "")},
                         {"traceback", joined(data.value("traceback", json::array()))}}));
}

// The end: how many cells ran, an error line when the cell ended with no
// error of its own (time limit, death), then E2B's last line.
void finish(const json& result, stream_sink& sink) {
    if (result.contains("execution_count") && result["execution_count"].is_number())
        sink.write(line({{"type", "number_of_executions"}, {"execution_count", result["execution_count"]}}));
    const auto status = result.value("status", "ok");
    if (!result["error"].is_object() && (status == "timeout" || status == "kernel_died"))
        sink.write(line({{"type", "error"},
                         {"name", status == "timeout" ? "TimeoutError" : "DeadKernelError"},
                         {"value", status == "timeout" ? "The cell ran past its time limit and was interrupted"
                                                       : "The kernel died while running the cell; its memory is lost, its files are kept"},
                         {"traceback", ""}}));
    sink.write(line({{"type", "end_of_execution"}}));
}

// A budgeted cell's output, as the live lines it would have streamed.
void replay(const json& result, stream_sink& sink) {
    for (const char* stream : {"stdout", "stderr"})
        if (const auto text = result.value(stream, ""); !text.empty()) encode(stream, {{"text", text}}, sink);
    for (const auto& r : result.value("results", json::array()))
        encode(r.value("is_main_result", false) ? "result" : "display", r, sink);
    if (result.contains("error") && result["error"].is_object()) encode("error", result["error"], sink);
}

std::map<std::string, std::string> env_of(const json& body) {
    auto env = kit::string_object(body, "env_vars", "env_vars");
    if (const auto why = agent::check_cell_env(env); !why.empty()) throw api_exception(400, "'env_vars': " + why);
    return env;
}

// The language a request names, as E2B's server normalizes it ("js" is
// javascript, "ts" typescript), checked against what the sandbox's image
// has; "python" when it names none.
std::string language_of(surface& e, const kernels::kernel& k, const json& body) {
    const auto it = body.find("language");
    if (it == body.end() || it->is_null()) return "python";
    if (!it->is_string()) throw api_exception(400, "'language' must be a string");
    const auto l = kernels::normalize_language(it->get<std::string>());
    const auto* spec = e.services.kernels.specs().find(k.spec_name());
    const auto& have = spec ? spec->context_languages : std::vector<std::string>{"python"};
    if (std::find(have.begin(), have.end(), l) == have.end()) {
        std::string list;
        for (const auto& h : have) list += (list.empty() ? "" : ", ") + h;
        throw api_exception(400, "Language '" + l.substr(0, 40) + "' is not available in this sandbox (" + list +
                                     "; the code-interpreter-v1 template has R, JavaScript, TypeScript and Bash)");
    }
    return l;
}

// The context a cell names: "" for the sandbox's kernel (no context,
// "default", or a language), else a code context's id.
std::string context_of(const json& body) {
    const auto it = body.find("context_id");
    if (it == body.end() || it->is_null()) return {};
    if (!it->is_string()) throw api_exception(400, "'context_id' must be a string");
    const auto id = it->get<std::string>();
    return id == "default" ? std::string() : id;
}

// E2B's server sends a keepalive line every few seconds; the SDK skips them.
// Returns what stops them.
std::function<void()> keepalives(boost::asio::io_context& io, const std::shared_ptr<stream_sink>& sink) {
    return util::every(io, std::chrono::seconds(5), [sink] { sink->write(line({{"type", "keepalive"}})); });
}

void execute(surface& e, const request_ptr& req, reply_fn reply) {
    const auto k = sandbox_kernel(e, req);
    const auto body = req->json_body(false);
    if (!body.is_object() || !body.contains("code") || !body["code"].is_string())
        throw api_exception(400, "'code' (a string) is required");
    if (body.contains("context_id") && body.contains("language") && !body["context_id"].is_null() &&
        !body["language"].is_null())
        throw api_exception(400, "Give a context or a language, not both");
    const auto language = language_of(e, *k, body);
    auto context_id = context_of(body);
    if (!context_id.empty() && !e.contexts->exists(k->id(), context_id))
        throw api_exception(404, "Context '" + context_id.substr(0, 64) + "' not found");
    if (context_id.empty() && language != "python") {
        // E2B's default context for the language, made on its first cell.
        const auto record = e.book.find(k->id());
        std::string why;
        context_id = e.contexts->for_language(k, language, std::string(home_dir),
                                              record ? record->env_vars : std::map<std::string, std::string>{}, why);
        if (context_id.empty()) throw api_exception(429, why);
    }
    if (context_id.empty())
        if (const auto no = e.cells.ready(k)) {
            auto res = rest_error(no->why.kind == kernels::failure_kind::busy ? 409 : 503, no->why.message);
            if (no->retry_after) res.headers.emplace_back("Retry-After", std::to_string(no->retry_after->count()));
            return reply(std::move(res));
        }
    const auto& p = k->policy();
    response res;
    res.content_type = "application/x-ndjson";
    res.headers.emplace_back("X-Accel-Buffering", "no");
    auto on_event = [](std::shared_ptr<stream_sink> sink) {
        return [sink](const std::string& event, const json& data) { encode(event, data, *sink); };
    };
    auto on_done = [](std::shared_ptr<stream_sink> sink, std::function<void()> stop) {
        return [sink, stop = std::move(stop)](json result) {
            finish(result, *sink);
            sink->close();
            stop();
        };
    };
    if (!context_id.empty()) {
        cell_request c;
        c.code = body["code"].get<std::string>();
        c.env = env_of(body);
        c.timeout = p.exec_timeout;
        c.output_limit_bytes = p.output_limit_bytes;
        c.result_limit_bytes = p.result_limit_bytes;
        c.interrupt_grace = e.services.kernels.config().cell_interrupt_grace;
        auto& contexts = *e.contexts;
        auto& io = e.agents.io();
        res.stream = [&contexts, &io, k, context_id, c = std::move(c), on_event, on_done](std::shared_ptr<stream_sink> sink) mutable {
            unsigned status = 0;
            std::string why;
            const auto cell = contexts.execute(k, context_id, std::move(c), on_event(sink), on_done(sink, keepalives(io, sink)),
                                               status, why);
            if (!cell) {
                // Refused once the stream began (the context went, or its queue is full): an error line.
                sink->write(line({{"type", "error"}, {"name", status == 429 ? "TooManyRequests" : "ContextError"},
                                  {"value", why}, {"traceback", ""}}));
                sink->write(line({{"type", "end_of_execution"}}));
                return sink->close();
            }
            sink->on_disconnect([&contexts, cell, id = k->id()] {
                spdlog::info("e2b: sandbox {}: the client left /execute; interrupting its context's cell", id);
                contexts.cancel(cell);
            });
        };
        return reply(std::move(res));
    }
    // The default context is the session's kernel: the core's cell, held to
    // the session's limits, with an output budget from the request (a client
    // beyond the SDK) or the sandbox's metadata "cellgate_max_output_tokens"
    // (set at Sandbox.create).
    core::cell_request cell;
    cell.code = body["code"].get<std::string>();
    cell.report_files = false;
    cell.env = env_of(body);
    cell.output_at = kit::whole_output_at(k->id());
    cell.surface = "e2b";
    json asked = json::object();
    for (const char* key : {"max_output_tokens", "max_output_bytes", "max_image_pixels"})
        if (body.contains(key)) asked[key] = body[key];
    if (!asked.contains("max_output_tokens") && !asked.contains("max_output_bytes"))
        if (const auto r = e.book.find(k->id()); r && r->metadata.count("cellgate_max_output_tokens") != 0) {
            try {
                asked["max_output_tokens"] = std::stoul(r->metadata.at("cellgate_max_output_tokens"));
            } catch (const std::exception&) {
                throw api_exception(400, "metadata 'cellgate_max_output_tokens' must be a whole number");
            }
        }
    if (!asked.empty()) {
        asked["code"] = cell.code;
        const auto budget = kit::cell_request_from(asked);
        cell.max_output_tokens = budget.max_output_tokens;
        cell.max_output_bytes = budget.max_output_bytes;
        cell.max_image_pixels = budget.max_image_pixels;
    }
    auto o = e.cells.options(*k, cell);
    const bool budgeted = o.budget_bytes > 0;
    auto& cells = e.cells;
    res.stream = [&cells, k, o = std::move(o), on_event, on_done, budgeted](std::shared_ptr<stream_sink> sink) mutable {
        // With a budget the SDK gets the cut output at the end, as if it had streamed.
        auto events = budgeted ? agent::execution::event_fn([](const std::string&, const json&) {}) : agent::execution::event_fn(on_event(sink));
        auto done = on_done(sink, keepalives(cells.agents().io(), sink));
        auto ex = cells.run(k, std::move(o), std::move(events), budgeted ? agent::execution::done_fn([sink, done](json result) {
            replay(result, *sink);
            done(std::move(result));
        }) : agent::execution::done_fn(done));
        // The request carries no time limit: a client that gives up goes away,
        // and its cell is interrupted.
        sink->on_disconnect([&cells, k, ex] {
            spdlog::info("e2b: sandbox {}: the client left /execute; interrupting its cell", k->id());
            cells.cancel(k->id(), ex);
        });
    };
    reply(std::move(res));
}

json default_context() { return {{"id", "default"}, {"language", "python"}, {"cwd", std::string(home_dir)}}; }

json to_json(const context_info& c) { return {{"id", c.id}, {"language", c.language}, {"cwd", c.cwd}}; }

// POST /contexts {"language"?, "cwd"?}: a new interpreter, ready when this answers.
void create_context(surface& e, const request_ptr& req, reply_fn reply) {
    const auto k = sandbox_kernel(e, req);
    auto body = req->json_body(true);
    if (body.is_null()) body = json::object();
    if (!body.is_object()) throw api_exception(400, "The body must be a JSON object");
    auto language = language_of(e, *k, body);
    std::string cwd(home_dir);
    if (const auto it = body.find("cwd"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) throw api_exception(400, "'cwd' must be a string");
        const auto rel = workspace_path(it->get<std::string>());
        cwd = rel.empty() ? std::string(home_dir) : std::string(home_dir) + "/" + rel;  // a missing one fails the start
    }
    const auto record = e.book.find(k->id());
    auto env = record ? record->env_vars : std::map<std::string, std::string>{};
    e.contexts->create(k, std::move(language), cwd, std::move(env), [reply](const context_info* c, unsigned status, std::string why) {
        if (!c) return reply(rest_error(status, why));
        reply(json_response(200, to_json(*c)));
    });
}

}  // namespace

void register_code_interpreter(router& r, surface& e) {
    auto add = [&r, &e](bhttp::verb v, const std::string& pattern, handler_fn h) {
        r.add_guarded(v, "/e2b" + pattern, sandbox_guard(e, interpreter_port, false), rest_handler(std::move(h)));
    };
    add(bhttp::verb::post, "/execute", [&e](const request_ptr& req, reply_fn reply) { execute(e, req, std::move(reply)); });
    add(bhttp::verb::get, "/contexts", [&e](const request_ptr& req, reply_fn reply) {
        const auto k = sandbox_kernel(e, req);
        auto all = json::array({default_context()});
        for (const auto& c : e.contexts->list(k->id())) all.push_back(to_json(c));
        reply(json_response(200, all));
    });
    add(bhttp::verb::post, "/contexts", [&e](const request_ptr& req, reply_fn reply) { create_context(e, req, std::move(reply)); });
    add(bhttp::verb::post, "/contexts/{context}/restart", [&e](const request_ptr& req, reply_fn reply) {
        const auto k = sandbox_kernel(e, req);
        const auto id = req->param("context");
        if (id != "default")
            return e.contexts->restart(k, id, [reply](unsigned status, std::string why) {
                reply(status == 0 ? empty_response(204) : rest_error(status, why));
            });
        e.services.kernels.restart(k, [reply](std::optional<kernels::failure> f) {
            reply(f ? kit::failure_response(*f) : empty_response(204));
        });
    });
    add(bhttp::verb::delete_, "/contexts/{context}", [&e](const request_ptr& req, reply_fn reply) {
        const auto k = sandbox_kernel(e, req);
        const auto id = req->param("context");
        if (id == "default") throw api_exception(400, "The default context is the sandbox's kernel; it cannot be removed (kill the sandbox)");
        if (!e.contexts->remove(k->id(), id)) throw api_exception(404, "Context '" + id.substr(0, 64) + "' not found");
        reply(empty_response(204));
    });
}

}  // namespace cellgate::e2b
