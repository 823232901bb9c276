// envd's process service over Connect: commands and PTYs in the sandbox,
// each a process of the session's process table (a launcher exec with the
// kernel's confinement). Start and Connect are server streams: a start event
// with the pid, output as base64 data events, keepalives, the end event, and
// Connect's end-of-stream frame.
#include "e2b/connect_rpc.hpp"
#include "e2b/surface.hpp"

#include "kit/request_models.hpp"
#include "processes/process_table.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <spdlog/spdlog.h>

#include <csignal>

namespace cellgate::e2b {

using namespace http;
using nlohmann::json;
using processes::process_ptr;

namespace {

// What E2B's envd says of an ending: "exit status N" or "signal: killed".
std::string status_text(const processes::process_exit& e) {
    if (e.signal == SIGKILL) return "signal: killed";
    if (e.signal == SIGTERM) return "signal: terminated";
    if (e.signal == SIGINT) return "signal: interrupt";
    if (e.signal != 0) return "signal: " + std::string(launcher::exec_signal_name(e.signal));
    return "exit status " + std::to_string(e.code);
}

json end_event(const processes::process_exit& e) {
    json end = {{"exitCode", e.code}, {"exited", e.signal == 0 && e.error.empty()}, {"status", status_text(e)}};
    if (!e.error.empty()) end["error"] = e.error;
    return {{"event", {{"end", end}}}};
}

// Streams one process's events to one client.
class event_stream : public processes::watcher {
public:
    event_stream(std::shared_ptr<stream_sink> sink, boost::asio::io_context& ioc) : sink_(std::move(sink)), io_(ioc) {}

    void begin(const process_ptr& p) {
        sink_->write(connect::envelope({{"event", {{"start", {{"pid", p->pid()}}}}}}));
        // The SDK pings every 50 s; idle links get cut sooner.
        stop_keepalive_ = util::every(io_, std::chrono::seconds(20), [sink = sink_] {
            sink->write(connect::envelope({{"event", {{"keepalive", json::object()}}}}));
        });
    }
    void output(processes::stream s, const std::string& bytes) override {
        sink_->write(connect::envelope({{"event", {{"data", {{std::string(processes::to_string(s)), base64_encode(bytes)}}}}}}));
    }
    void exited(const processes::process_exit& e) override {
        sink_->write(connect::envelope(end_event(e)));
        sink_->write(connect::end_stream());
        sink_->close();
        if (auto stop = std::exchange(stop_keepalive_, nullptr)) stop();
    }

private:
    std::shared_ptr<stream_sink> sink_;
    boost::asio::io_context& io_;
    std::function<void()> stop_keepalive_;
};

// Follows `p` on a Connect stream; a client that leaves stops following (a
// Start stream's client leaving does not end the process: E2B's commands
// run on when the SDK's connection drops, until killed).
response follow(surface& e, const process_ptr& p) {
    return connect::stream_response([&e, p](std::shared_ptr<stream_sink> sink) {
        auto s = std::make_shared<event_stream>(sink, e.agents.io());
        s->begin(p);
        const auto id = p->subscribe(s);
        sink->on_disconnect([p, id] { p->unsubscribe(id); });
    });
}

std::uint16_t side(const json& size, const char* key, std::uint16_t fallback) {
    const auto it = size.find(key);
    if (it == size.end() || it->is_null()) return fallback;
    if (!it->is_number_unsigned() && !it->is_number_integer()) throw api_exception(400, std::string("pty size '") + key + "' must be a number");
    const auto v = it->get<long long>();
    if (v < 1 || v > launcher::max_exec_tty_side) throw api_exception(400, "The PTY's rows and cols must be 1…1000");
    return static_cast<std::uint16_t>(v);
}

// StartRequest → the exec: E2B's defaults (the home as cwd, its HOME and
// USER), the sandbox's create-time envs under the call's own.
processes::command command_from(const json& m, const sandbox_record& record) {
    const auto& cfg = m.value("process", json::object());
    if (!cfg.is_object() || !cfg.contains("cmd") || !cfg["cmd"].is_string())
        throw api_exception(400, "'process.cmd' (a string) is required");
    processes::command c;
    c.spec.argv.push_back(cfg["cmd"].get<std::string>());
    if (const auto it = cfg.find("args"); it != cfg.end() && !it->is_null()) {
        if (!it->is_array()) throw api_exception(400, "'process.args' must be an array of strings");
        for (const auto& a : *it) {
            if (!a.is_string()) throw api_exception(400, "'process.args' must be an array of strings");
            c.spec.argv.push_back(a.get<std::string>());
        }
    }
    std::string cwd(home_dir);
    if (const auto it = cfg.find("cwd"); it != cfg.end() && it->is_string() && !it->get<std::string>().empty())
        cwd = it->get<std::string>();
    // Only the home is the sandbox's own; a cwd elsewhere is its read-only image.
    c.spec.cwd = cwd.front() == '/' ? cwd : std::string(home_dir) + "/" + cwd;
    c.spec.env = record.env_vars;
    c.spec.env["HOME"] = std::string(home_dir);
    c.spec.env["USER"] = "user";
    c.spec.env["PWD"] = c.spec.cwd;
    for (auto& [k, v] : kit::string_object(cfg, "envs", "process.envs")) c.spec.env[k] = v;
    if (const auto pty = m.find("pty"); pty != m.end() && pty->is_object()) {
        const auto size = pty->value("size", json::object());
        c.spec.tty = true;
        c.spec.rows = side(size, "rows", 24);
        c.spec.cols = side(size, "cols", 80);
        if (!c.spec.env.count("TERM")) c.spec.env["TERM"] = "xterm-256color";
    } else {
        c.spec.stdin_ = m.value("stdin", false);
    }
    if (const auto it = m.find("tag"); it != m.end() && it->is_string()) c.tag = it->get<std::string>().substr(0, 256);
    return c;
}

process_ptr selected(surface& e, const std::string& kernel_id, const json& m) {
    const auto sel = m.value("process", json::object());
    process_ptr p;
    if (sel.is_object() && sel.contains("pid") && (sel["pid"].is_number_unsigned() || sel["pid"].is_number_integer()))
        p = e.processes->find(kernel_id, static_cast<std::uint32_t>(sel["pid"].get<long long>()));
    else if (sel.is_object() && sel.contains("tag") && sel["tag"].is_string())
        p = e.processes->find_tag(kernel_id, sel["tag"].get<std::string>());
    else
        throw api_exception(400, "'process' needs a pid or a tag");
    if (!p) throw api_exception(404, "No such process");
    return p;
}

int signal_of(const json& m) {
    const auto it = m.find("signal");
    if (it == m.end() || it->is_null()) throw api_exception(400, "'signal' is required");
    if (it->is_number_integer() || it->is_number_unsigned()) {
        const int s = it->get<int>();
        if (launcher::is_exec_signal(s)) return s;
    } else if (it->is_string()) {
        auto name = it->get<std::string>();
        if (name.starts_with("SIGNAL_")) name = name.substr(7);
        if (const auto s = launcher::exec_signal_from_name(name)) return *s;
    }
    throw api_exception(400, "Unsupported signal (SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)");
}

std::string bytes_member(const json& input, const char* key) {
    const auto it = input.find(key);
    if (it == input.end() || !it->is_string()) return {};
    auto d = base64_decode(it->get<std::string>());
    if (!d) throw api_exception(400, std::string("'input.") + key + "' is not base64");
    return *d;
}

json process_info(const processes::process& p) {
    const auto& spec = p.config().spec;
    json args = json::array();
    for (std::size_t i = 1; i < spec.argv.size(); ++i) args.push_back(spec.argv[i]);
    json info = {{"config", {{"cmd", spec.argv.empty() ? "" : spec.argv[0]}, {"args", args}, {"envs", spec.env}, {"cwd", spec.cwd}}},
                 {"pid", p.pid()}};
    if (!p.config().tag.empty()) info["tag"] = p.config().tag;
    return info;
}

void start(surface& e, const request_ptr& req, reply_fn reply) {
    const auto k = sandbox_kernel(e, req);
    const auto m = connect::request_message(req->req.body());
    const auto record = e.book.find(k->id());
    if (!record) throw api_exception(404, "No such sandbox");
    auto c = command_from(m, *record);
    k->touch();
    e.processes->start(k, std::move(c), [&e, reply](process_ptr p, unsigned status, std::string why) {
        if (!p) return reply(connect_error(connect_code_for(status), why));
        reply(follow(e, p));
    });
}

}  // namespace

void register_process_service(router& r, surface& e) {
    auto streaming = [&r, &e](const std::string& method, handler_fn h) {
        r.add_guarded(bhttp::verb::post, "/e2b/process.Process/" + method, sandbox_guard(e, envd_port, true),
                      connect_handler(std::move(h)));
    };
    auto unary = [&r, &e](const std::string& method, std::function<json(const std::string&, const json&)> call) {
        r.add_guarded(bhttp::verb::post, "/e2b/process.Process/" + method, sandbox_guard(e, envd_port, true),
                      connect_handler([&e, call = std::move(call)](const request_ptr& req, reply_fn reply) {
                          const auto k = sandbox_kernel(e, req);
                          const auto body = req->json_body();
                          k->touch();
                          reply(json_response(200, call(k->id(), body.is_object() ? body : json::object())));
                      }));
    };
    streaming("Start", [&e](const request_ptr& req, reply_fn reply) { start(e, req, std::move(reply)); });
    streaming("Connect", [&e](const request_ptr& req, reply_fn reply) {
        const auto k = sandbox_kernel(e, req);
        reply(follow(e, selected(e, k->id(), connect::request_message(req->req.body()))));
    });
    unary("List", [&e](const std::string& kernel_id, const json&) {
        json list = json::array();
        for (const auto& p : e.processes->list(kernel_id))
            if (p->running()) list.push_back(process_info(*p));
        return json{{"processes", list}};
    });
    unary("SendSignal", [&e](const std::string& kernel_id, const json& m) {
        const auto p = selected(e, kernel_id, m);
        if (!p->running()) throw api_exception(404, "The process has ended");
        p->signal(signal_of(m));
        return json::object();
    });
    unary("SendInput", [&e](const std::string& kernel_id, const json& m) {
        const auto p = selected(e, kernel_id, m);
        const auto input = m.value("input", json::object());
        auto data = bytes_member(input, p->config().spec.tty ? "pty" : "stdin");
        if (data.empty()) data = bytes_member(input, p->config().spec.tty ? "stdin" : "pty");
        std::string why;
        if (!p->write_stdin(std::move(data), why)) throw api_exception(p->running() ? 400 : 404, why);
        return json::object();
    });
    unary("CloseStdin", [&e](const std::string& kernel_id, const json& m) {
        const auto p = selected(e, kernel_id, m);
        if (!p->running()) throw api_exception(404, "The process has ended");
        p->close_stdin();
        return json::object();
    });
    unary("Update", [&e](const std::string& kernel_id, const json& m) {
        const auto p = selected(e, kernel_id, m);
        const auto pty = m.value("pty", json::object());
        if (!p->config().spec.tty) throw api_exception(400, "The process has no PTY");
        if (pty.is_object() && pty.contains("size")) {
            const auto& size = pty["size"];
            p->resize(side(size, "rows", 24), side(size, "cols", 80));
        }
        return json::object();
    });
}

}  // namespace cellgate::e2b
