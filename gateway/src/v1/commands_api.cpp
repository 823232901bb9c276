// Commands in a session's sandbox (/v1/sessions/{id}/commands): run one and
// wait for it (JSON), follow it as Server-Sent Events, or start it in the
// background; list, attach, feed stdin, signal, resize. Each is a process of
// the process table: a launcher exec with the kernel's own confinement.
// docs/agent-api.md has the contract.
#include "v1/v1_api.hpp"
#include "kit/request_models.hpp"

#include "processes/process_table.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <charconv>
#include <cmath>

namespace cellgate::v1 {

using namespace kit;

using namespace http;
using nlohmann::json;
using processes::process_ptr;

namespace {

constexpr const char* home = "/home/user";

json exit_json(const std::optional<processes::process_exit>& e) {
    if (!e) return nullptr;
    json j = {{"exit_code", e->code},
              {"signal", e->signal == 0 ? json(nullptr) : json(std::string(launcher::exec_signal_name(e->signal)))}};
    if (!e->error.empty()) j["error"] = e->error;
    return j;
}

json command_model(const std::string& session_id, const processes::process& p) {
    const auto& spec = p.config().spec;
    return {{"pid", p.pid()},
            {"argv", spec.argv},
            {"cwd", spec.cwd},
            {"tty", spec.tty},
            {"stdin", spec.stdin_ || spec.tty},
            {"tag", p.config().tag},
            {"started", kernels::iso8601(p.started())},
            {"running", p.running()},
            {"exit", exit_json(p.exit())},
            {"url", "/v1/sessions/" + session_id + "/commands/" + std::to_string(p.pid())}};
}

// POST body → the exec: "cmd" (a shell line, run by bash -lc) or "argv".
processes::command command_from(const json& b) {
    processes::command c;
    const bool has_cmd = b.contains("cmd") && !b["cmd"].is_null();
    const bool has_argv = b.contains("argv") && !b["argv"].is_null();
    if (has_cmd == has_argv) throw api_exception(400, "Give 'cmd' (a shell command line) or 'argv' (an array), one of them");
    if (has_cmd) {
        if (!b["cmd"].is_string() || b["cmd"].get<std::string>().find_first_not_of(" \t\r\n") == std::string::npos)
            throw api_exception(400, "'cmd' must be a non-empty shell command line");
        c.spec.argv = {"/bin/bash", "-l", "-c", b["cmd"].get<std::string>()};
    } else {
        if (!b["argv"].is_array() || b["argv"].empty()) throw api_exception(400, "'argv' must be a non-empty array of strings");
        for (const auto& a : b["argv"]) {
            if (!a.is_string()) throw api_exception(400, "'argv' must be a non-empty array of strings");
            c.spec.argv.push_back(a.get<std::string>());
        }
    }
    c.spec.cwd = string_field(b, "cwd", home);
    if (!c.spec.cwd.empty() && c.spec.cwd.front() != '/') c.spec.cwd = std::string(home) + "/" + c.spec.cwd;
    c.spec.env = {{"HOME", home}, {"USER", "user"}, {"PWD", c.spec.cwd}};
    for (auto& [k, v] : string_object(b, "env", "env")) c.spec.env[k] = v;
    if (const auto it = b.find("tty"); it != b.end() && !it->is_null() && *it != false) {
        c.spec.tty = true;
        if (it->is_object()) {
            c.spec.rows = static_cast<std::uint16_t>(it->value("rows", 24));
            c.spec.cols = static_cast<std::uint16_t>(it->value("cols", 80));
        }
        if (!c.spec.env.count("TERM")) c.spec.env["TERM"] = "xterm-256color";
    }
    c.spec.stdin_ = !c.spec.tty && b.value("stdin", false);
    c.tag = string_field(b, "tag").substr(0, 256);
    return c;
}

// Collects a foreground command's output, within the session's output cap.
class collector : public processes::watcher {
public:
    collector(std::size_t limit, reply_fn reply, std::string session_id, process_ptr p)
        : limit_(limit), reply_(std::move(reply)), session_id_(std::move(session_id)), p_(std::move(p)) {}
    void output(processes::stream s, const std::string& bytes) override {
        auto& out = s == processes::stream::stderr_ ? stderr_ : stdout_;
        const auto room = limit_ > used_ ? limit_ - used_ : 0;
        if (bytes.size() > room) truncated_ = true;
        out.append(bytes, 0, std::min(room, bytes.size()));
        used_ += std::min(room, bytes.size());
    }
    void exited(const processes::process_exit& e) override {
        auto model = command_model(session_id_, *p_);
        model["exit"] = exit_json(e);
        model["running"] = false;
        model["stdout"] = stdout_;
        model["stderr"] = stderr_;
        model["truncated"] = truncated_;
        if (reply_) std::exchange(reply_, nullptr)(json_response(200, model));
    }

private:
    std::size_t limit_, used_ = 0;
    reply_fn reply_;
    std::string session_id_;
    process_ptr p_;
    std::string stdout_, stderr_;
    bool truncated_ = false;
};

// Forwards a command's life to a Server-Sent Events stream.
class event_forwarder : public processes::watcher {
public:
    explicit event_forwarder(std::shared_ptr<stream_sink> sink) : sink_(std::move(sink)) {}
    void output(processes::stream s, const std::string& bytes) override {
        if (s == processes::stream::pty) sink_->write(sse_event("pty", {{"data_base64", base64_encode(bytes)}}));
        else sink_->write(sse_event(std::string(processes::to_string(s)), {{"text", bytes}}));
    }
    void exited(const processes::process_exit& e) override {
        sink_->write(sse_event("exit", exit_json(e)));
        sink_->close();
    }

private:
    std::shared_ptr<stream_sink> sink_;
};

response follow(const std::string& session_id, const process_ptr& p, bool kill_on_leave) {
    response res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("X-Accel-Buffering", "no");
    res.stream = [session_id, p, kill_on_leave](std::shared_ptr<stream_sink> sink) {
        sink->write(sse_event("start", command_model(session_id, *p)));
        const auto id = p->subscribe(std::make_shared<event_forwarder>(sink));
        sink->on_disconnect([p, id, kill_on_leave] {
            p->unsubscribe(id);
            if (kill_on_leave) p->kill();  // a foreground command ends with its caller
        });
    };
    return res;
}

std::uint32_t pid_param(const request_ptr& req) {
    const auto& s = req->param("pid");
    std::uint32_t pid = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
    if (ec != std::errc() || end != s.data() + s.size()) throw api_exception(404, "No such command: " + s.substr(0, 20));
    return pid;
}

process_ptr command_or_404(processes::process_table& t, const kernels::kernel_ptr& k, const request_ptr& req) {
    auto p = t.find(k->id(), pid_param(req));
    if (!p) throw api_exception(404, "No such command: " + req->param("pid").substr(0, 20));
    return p;
}

// "timeout_s": whole seconds (a fraction rounds up), at most the session's
// cell limit, which is also the default of a foreground command; a
// background one without it lives as long as its session.
std::chrono::seconds command_timeout(const json& body, std::chrono::seconds cell_limit, bool background) {
    const auto it = body.find("timeout_s");
    if (it == body.end() || it->is_null()) return background ? std::chrono::seconds(0) : cell_limit;
    if (!it->is_number() || it->get<double>() <= 0 || !std::isfinite(it->get<double>()))
        throw api_exception(400, "'timeout_s' must be a positive number of seconds");
    const auto asked = static_cast<long>(std::ceil(std::min(it->get<double>(), 1e9)));
    if (cell_limit.count() > 0 && asked > cell_limit.count())
        throw api_exception(400, "'timeout_s' may be at most the session's cell limit, " +
                                     std::to_string(cell_limit.count()) + " s");
    return std::chrono::seconds(asked);
}

void run(services& s, processes::process_table& table, const request_ptr& req, reply_fn reply) {
    const auto k = kernel_or_404(s, req, req->param("id"));
    const auto body = req->json_body(false);
    if (!body.is_object()) throw api_exception(400, "The body must be a JSON object");
    auto c = command_from(body);
    const bool background = body.value("background", false);
    const auto timeout = command_timeout(body, k->policy().exec_timeout, background);
    const bool sse = wants_event_stream(req);
    const auto limit = k->policy().output_limit_bytes;
    k->touch();
    table.start(k, std::move(c), [&table, k, background, timeout, sse, limit, reply](process_ptr p, unsigned status, std::string why) {
        if (!p) return reply(error_response(status, why));
        if (background) {
            auto res = json_response(201, command_model(k->id(), *p));
            res.headers.emplace_back("Location", "/v1/sessions/" + k->id() + "/commands/" + std::to_string(p->pid()));
            return reply(std::move(res));
        }
        // A foreground command lives at most the session's cell time limit.
        if (timeout.count() > 0) {
            auto timer = std::make_shared<boost::asio::steady_timer>(table.io(), timeout);
            timer->async_wait([timer, p](const boost::system::error_code& ec) {
                if (!ec && p->running()) p->kill();
            });
        }
        if (sse) return reply(follow(k->id(), p, true));
        p->subscribe(std::make_shared<collector>(limit, reply, k->id(), p));
    });
}

}  // namespace

void register_commands_api(router& r, services& s, processes::process_table& table) {
    const std::string base = "/v1/sessions/{id}/commands";
    r.add(bhttp::verb::post, base, [&s, &table](const request_ptr& req, reply_fn reply) { run(s, table, req, std::move(reply)); });
    r.add(bhttp::verb::get, base, [&s, &table](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        json list = json::array();
        for (const auto& p : table.list(k->id())) list.push_back(command_model(k->id(), *p));
        reply(json_response(200, {{"commands", list}}));
    });
    r.add(bhttp::verb::get, base + "/{pid}", [&s, &table](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        reply(json_response(200, command_model(k->id(), *command_or_404(table, k, req))));
    });
    r.add(bhttp::verb::get, base + "/{pid}/events", [&s, &table](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        reply(follow(k->id(), command_or_404(table, k, req), false));
    });
    r.add(bhttp::verb::post, base + "/{pid}/stdin", [&s, &table](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto p = command_or_404(table, k, req);
        const auto body = req->json_body(false);
        std::string data = string_field(body, "data");
        if (const auto b64 = string_field(body, "data_base64"); !b64.empty()) {
            auto d = base64_decode(b64);
            if (!d) throw api_exception(400, "'data_base64' is not base64");
            data = std::move(*d);
        }
        std::string why;
        if (!data.empty() && !p->write_stdin(std::move(data), why)) throw api_exception(p->running() ? 400 : 409, why);
        if (body.value("eof", false)) p->close_stdin();
        reply(empty_response(204));
    });
    r.add(bhttp::verb::post, base + "/{pid}/signal", [&s, &table](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto p = command_or_404(table, k, req);
        const auto name = string_field(req->json_body(false), "signal", "SIGTERM");
        const auto sig = launcher::exec_signal_from_name(name);
        if (!sig) throw api_exception(400, "Unsupported signal '" + name.substr(0, 20) + "' (SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)");
        if (!p->running()) throw api_exception(409, "The command has ended");
        p->signal(*sig);
        reply(empty_response(204));
    });
    r.add(bhttp::verb::post, base + "/{pid}/resize", [&s, &table](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto p = command_or_404(table, k, req);
        const auto body = req->json_body(false);
        if (!p->config().spec.tty) throw api_exception(400, "The command has no terminal");
        const auto rows = body.value("rows", 0), cols = body.value("cols", 0);
        if (rows < 1 || rows > 1000 || cols < 1 || cols > 1000) throw api_exception(400, "'rows' and 'cols' must be 1…1000");
        p->resize(static_cast<std::uint16_t>(rows), static_cast<std::uint16_t>(cols));
        reply(empty_response(204));
    });
}

}  // namespace cellgate::v1
