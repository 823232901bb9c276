// The code interpreter's port (49999): /execute as the SDK's NDJSON stream,
// over the same executions the /v1 API runs, and the code contexts.
#include "e2b/surface.hpp"

#include "api/request_models.hpp"
#include "util/api_error.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

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

std::map<std::string, std::string> env_of(const json& body) {
    auto env = api::string_object(body, "env_vars", "env_vars");
    if (const auto why = agent::check_cell_env(env); !why.empty()) throw api_exception(400, "'env_vars': " + why);
    return env;
}

void check_language(const json& body) {
    const auto it = body.find("language");
    if (it == body.end() || it->is_null()) return;
    if (!it->is_string()) throw api_exception(400, "'language' must be a string");
    const auto l = it->get<std::string>();
    if (l != "python" && l != "python3")
        throw api_exception(400, "Language '" + l.substr(0, 40) + "' is not available in this sandbox (python only)");
}

void check_context(const json& body) {
    const auto it = body.find("context_id");
    if (it == body.end() || it->is_null()) return;
    if (!it->is_string()) throw api_exception(400, "'context_id' must be a string");
    if (it->get<std::string>() != "default")
        throw api_exception(404, "Context '" + it->get<std::string>().substr(0, 64) + "' not found");
}

void execute(surface& e, const request_ptr& req, reply_fn reply) {
    const auto k = sandbox_kernel(e, req);
    const auto body = req->json_body(false);
    if (!body.is_object() || !body.contains("code") || !body["code"].is_string())
        throw api_exception(400, "'code' (a string) is required");
    if (body.contains("context_id") && body.contains("language") && !body["context_id"].is_null() &&
        !body["language"].is_null())
        throw api_exception(400, "Give a context or a language, not both");
    check_language(body);
    check_context(body);
    if (k->state() == kernels::kernel_state::dead) {
        e.services.kernels.revive(k);
        auto res = rest_error(503, "The sandbox's kernel is dead and is being restarted; its files are kept. Try again shortly.");
        res.headers.emplace_back("Retry-After", "2");
        return reply(std::move(res));
    }
    agent::execution_options o;
    o.code = body["code"].get<std::string>();
    const auto& p = k->policy();
    o.timeout = p.exec_timeout;
    o.output_limit_bytes = p.output_limit_bytes;
    o.result_limit_bytes = p.result_limit_bytes;
    o.report_files = false;
    o.env = env_of(body);
    auto& agents = e.agents;
    response res;
    res.content_type = "application/x-ndjson";
    res.headers.emplace_back("X-Accel-Buffering", "no");
    res.stream = [&agents, k, o = std::move(o)](std::shared_ptr<stream_sink> sink) mutable {
        // E2B's server sends a keepalive line every few seconds; the SDK skips them.
        auto keepalive = std::make_shared<boost::asio::steady_timer>(agents.io());
        auto tick = std::make_shared<std::function<void()>>();
        *tick = [keepalive, sink, weak = std::weak_ptr(tick)] {
            keepalive->expires_after(std::chrono::seconds(5));
            keepalive->async_wait([sink, weak](const boost::system::error_code& ec) {
                if (ec) return;
                sink->write(line({{"type", "keepalive"}}));
                if (auto t = weak.lock()) (*t)();
            });
        };
        (*tick)();
        auto ex = agents.submit(
            k, std::move(o), [sink](const std::string& event, const json& data) { encode(event, data, *sink); },
            [sink, keepalive, tick](json result) {
                finish(result, *sink);
                sink->close();
                keepalive->cancel();
                *tick = nullptr;
            });
        // The request carries no time limit: a client that gives up goes away,
        // and its cell is interrupted.
        sink->on_disconnect([&agents, k, ex] {
            spdlog::info("e2b: sandbox {}: the client left /execute; interrupting its cell", k->id());
            agents.cancel(k->id(), ex);
        });
    };
    reply(std::move(res));
}

json default_context() { return {{"id", "default"}, {"language", "python"}, {"cwd", std::string(home_dir)}}; }

}  // namespace

void register_code_interpreter(router& r, surface& e) {
    auto add = [&r, &e](bhttp::verb v, const std::string& pattern, handler_fn h) {
        r.add_guarded(v, "/e2b" + pattern, sandbox_guard(e, interpreter_port, false), rest_handler(std::move(h)));
    };
    add(bhttp::verb::post, "/execute", [&e](const request_ptr& req, reply_fn reply) { execute(e, req, std::move(reply)); });
    add(bhttp::verb::get, "/contexts", [&e](const request_ptr& req, reply_fn reply) {
        sandbox_kernel(e, req);
        reply(json_response(200, json::array({default_context()})));
    });
    add(bhttp::verb::post, "/contexts", [&e](const request_ptr& req, reply_fn reply) {
        sandbox_kernel(e, req);
        reply(rest_error(501, "Code contexts other than 'default' are not available in cellgate yet"));
    });
    add(bhttp::verb::post, "/contexts/{context}/restart", [&e](const request_ptr& req, reply_fn reply) {
        const auto k = sandbox_kernel(e, req);
        if (req->param("context") != "default") throw api_exception(404, "Context not found");
        e.services.kernels.restart(k, [reply](std::optional<kernels::failure> f) {
            reply(f ? api::failure_response(*f) : empty_response(204));
        });
    });
}

}  // namespace cellgate::e2b
