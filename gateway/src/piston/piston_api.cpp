// Piston's v2 API (piston/piston_api.hpp): the wire, over core/runs.
#include "piston/piston_api.hpp"

#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include "cellgate/launcher/exec_spec.hpp"

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <cmath>

namespace cellgate::piston {

using namespace http;
using nlohmann::json;

namespace {

constexpr std::uint16_t ws_already_initialized = 4000, ws_init_timeout = 4001, ws_notified_error = 4002,
                        ws_not_initialized = 4003, ws_stdin_only = 4004, ws_invalid_signal = 4005,
                        ws_job_completed = 4999;

// Piston's words for a job it will not run (400 {message}).
struct job_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string decode_file(const json& file, std::size_t i) {
    const auto& content = file["content"].get_ref<const std::string&>();
    const auto enc = file.contains("encoding") && file["encoding"].is_string() ? file["encoding"].get<std::string>() : "utf8";
    if (enc == "utf8") return content;
    if (enc == "base64") {
        auto bytes = base64_decode(content);
        if (!bytes) throw job_error("files[" + std::to_string(i) + "].content is not valid base64");
        return std::move(*bytes);
    }
    if (enc == "hex") {
        if (content.size() % 2 != 0) throw job_error("files[" + std::to_string(i) + "].content is not valid hex");
        std::string bytes;
        bytes.reserve(content.size() / 2);
        for (std::size_t k = 0; k < content.size(); k += 2) {
            const auto hex = [&](char c) -> int {
                if (c >= '0' && c <= '9') return c - '0';
                if (c >= 'a' && c <= 'f') return c - 'a' + 10;
                if (c >= 'A' && c <= 'F') return c - 'A' + 10;
                throw job_error("files[" + std::to_string(i) + "].content is not valid hex");
            };
            bytes.push_back(static_cast<char>(hex(content[k]) * 16 + hex(content[k + 1])));
        }
        return bytes;
    }
    throw job_error("files[" + std::to_string(i) + "].encoding must be utf8, base64 or hex");
}

// Piston's get_job: the same checks, in its order, with its messages.
core::run_request job_from(const json& body, const core::runtime_table& runtimes, const std::string& tenant,
                           const piston_options& o) {
    if (!body.is_object()) throw job_error("the request body must be a JSON object");
    auto text = [&](const char* key) -> std::string {
        const auto it = body.find(key);
        if (it == body.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
            throw job_error(std::string(key) + " is required as a string");
        return it->get<std::string>();
    };
    const auto language = text("language");
    const auto version = text("version");
    const auto files = body.find("files");
    if (files == body.end() || !files->is_array()) throw job_error("files is required as an array");
    for (std::size_t i = 0; i < files->size(); ++i)
        if (!(*files)[i].is_object() || !(*files)[i].contains("content") || !(*files)[i]["content"].is_string())
            throw job_error("files[" + std::to_string(i) + "].content is required as a string");
    auto rt = runtimes.find(tenant, language, version);
    if (!rt) throw job_error(language + "-" + version + " runtime is unknown");
    bool utf8 = false;
    for (const auto& f : *files) utf8 = utf8 || !f.contains("encoding") || f["encoding"] == "utf8";
    if (!utf8) throw job_error("files must include at least one utf8 encoded file");

    core::run_request r;
    r.tenant = tenant;
    r.rt = std::move(*rt);
    r.compile = o.compile;
    r.run = o.run;
    for (const char* constraint : {"memory_limit", "timeout", "cpu_time"}) {
        for (const char* stage : {"compile", "run"}) {
            const std::string name = std::string(stage) + "_" + constraint;
            const auto it = body.find(name);
            // Absent, null, false or 0: the configured value (Piston passes a
            // 0 through; a zero limit is never what a client means).
            if (it == body.end() || it->is_null() || *it == false || *it == 0) continue;
            if (!it->is_number()) throw job_error("If specified, " + name + " must be a number");
            auto& l = std::string_view(stage) == "compile" ? r.compile : r.run;
            const double v = it->get<double>();
            const double configured = std::string_view(constraint) == "memory_limit" ? static_cast<double>(l.memory)
                                      : std::string_view(constraint) == "timeout"    ? static_cast<double>(l.wall.count())
                                                                                     : static_cast<double>(l.cpu.count());
            if (!std::isfinite(v)) throw job_error(name + " must be non-negative");
            // As Piston: with no configured limit (memory's -1) any value
            // passes, and a negative one means none (piston-client sends -1).
            if (configured > 0 && v > configured)
                throw job_error(name + " cannot exceed the configured limit of " + json(static_cast<std::int64_t>(configured)).dump());
            if (configured > 0 && v < 0) throw job_error(name + " must be non-negative");
            const auto n = v < 0 ? std::int64_t{-1} : static_cast<std::int64_t>(std::min(v, 1e15));
            if (std::string_view(constraint) == "memory_limit") l.memory = n;
            else if (std::string_view(constraint) == "timeout") l.wall = std::chrono::milliseconds(n);
            else l.cpu = std::chrono::milliseconds(n);
        }
    }
    for (std::size_t i = 0; i < files->size(); ++i) {
        const auto& f = (*files)[i];
        core::run_file file;
        file.name = f.contains("name") && f["name"].is_string() && !f["name"].get_ref<const std::string&>().empty()
                        ? f["name"].get<std::string>()
                        : "file" + std::to_string(i) + ".code";
        file.content = decode_file(f, i);
        r.files.push_back(std::move(file));
    }
    if (const auto it = body.find("args"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw job_error("args must be an array");
        for (const auto& a : *it) r.args.push_back(a.is_string() ? a.get<std::string>() : a.dump());
    }
    if (const auto it = body.find("stdin"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) throw job_error("stdin must be a string");
        r.stdin_data = it->get<std::string>();
    }
    return r;
}

json stage_json(const core::stage_result& s) {
    return {{"stdout", valid_utf8(s.stdout_)},
            {"stderr", valid_utf8(s.stderr_)},
            {"output", valid_utf8(s.output)},
            {"code", s.code ? json(*s.code) : json(nullptr)},
            {"signal", s.signal.empty() ? json(nullptr) : json(s.signal)},
            {"message", s.message.empty() ? json(nullptr) : json(s.message)},
            {"status", s.status.empty() ? json(nullptr) : json(s.status)},
            {"memory", s.memory},
            {"cpu_time", s.cpu_ms},
            {"wall_time", s.wall_ms}};
}

json result_json(const core::runtime& rt, const core::run_result& r) {
    json out = {{"language", rt.language}, {"version", rt.version}};
    if (r.compile) out["compile"] = stage_json(*r.compile);
    // Piston's backward compatibility: a job whose compile failed has its
    // compile stage as its run.
    out["run"] = r.run ? stage_json(*r.run) : r.compile ? stage_json(*r.compile) : json(nullptr);
    return out;
}

// A POST's JSON body. Piston answers 415 unless the type is JSON; the most
// installed npm client (piston-client 1.0.2) sends its JSON as text/plain
// (node-fetch's type for a string), so that is taken too when it is JSON.
json json_body_of(const request_ptr& req) {
    const auto type = header_value(req->req, "content-type");
    if (!type.starts_with("application/json") && !type.starts_with("text/plain"))
        throw api_exception(415, "requests must be of type application/json");
    return req->json_body(false);
}

// POST /execute: the whole result in one answer.
class execute_observer : public core::run_observer {
public:
    execute_observer(reply_fn reply, core::runtime rt) : reply_(std::move(reply)), rt_(std::move(rt)) {}
    void done(core::run_result r) override { reply_(json_response(200, result_json(rt_, r))); }
    void failed(unsigned status, std::string message, std::optional<std::chrono::seconds> retry_after) override {
        reply_(kit::refusal(status, message, retry_after));
    }

private:
    reply_fn reply_;
    core::runtime rt_;
};

// The names a WebSocket job may send (Piston's SIGNALS that an exec'd process takes).
int signal_number(const json& name) {
    if (!name.is_string()) return 0;
    const auto sig = launcher::exec_signal_from_name(name.get<std::string>());
    return sig ? *sig : 0;
}

struct connect_context {
    kit::services& s;
    core::runs& runs;
    core::runtime_table& runtimes;
    piston_options options;
};

// WS /connect: one job per socket.
class connect_peer : public socket_peer, public core::run_observer, public std::enable_shared_from_this<connect_peer> {
public:
    connect_peer(std::shared_ptr<connect_context> c, std::shared_ptr<socket_link> link, std::string tenant)
        : c_(std::move(c)), link_(std::move(link)), tenant_(std::move(tenant)), timer_(c_->runs.io()) {}

    void start() {
        timer_.expires_after(std::chrono::seconds(1));
        timer_.async_wait([w = weak_from_this()](boost::system::error_code ec) {
            if (ec) return;
            if (auto self = w.lock()) {
                std::lock_guard lock(self->mutex_);
                if (!self->initialized_) self->link_->close_with_code(ws_init_timeout, "Initialization Timeout");
            }
        });
    }

    void received(std::string text) override {
        std::unique_lock lock(mutex_);
        if (closed_) return;
        const auto msg = json_nesting_within(text, max_body_json_depth) ? json::parse(text, nullptr, false) : json();
        try {
            if (!msg.is_object()) throw job_error("the message must be a JSON object");
            const auto type = msg.value("type", std::string());
            if (type == "init") {
                if (initialized_) return link_->close_with_code(ws_already_initialized, "Already Initialized");
                auto r = job_from(msg, c_->runtimes, tenant_, c_->options);
                r.interactive = true;
                initialized_ = true;
                rt_ = r.rt;
                lock.unlock();
                auto handle = c_->runs.start(std::move(r), shared_from_this());
                lock.lock();
                handle_ = std::move(handle);
                if (closed_ && handle_) handle_->abandon();
            } else if (type == "data") {
                if (!initialized_) return link_->close_with_code(ws_not_initialized, "Not yet initialized");
                if (msg.value("stream", std::string()) != "stdin") return link_->close_with_code(ws_stdin_only, "Can only write to stdin");
                if (!msg.contains("data") || !msg["data"].is_string()) throw job_error("data must be a string");
                if (handle_) handle_->write_stdin(msg["data"].get<std::string>());
            } else if (type == "signal") {
                if (!initialized_) return link_->close_with_code(ws_not_initialized, "Not yet initialized");
                const int sig = signal_number(msg.value("signal", json()));
                if (sig == 0) return link_->close_with_code(ws_invalid_signal, "Invalid signal");
                if (handle_) handle_->signal(sig);
            }
        } catch (const std::exception& e) {
            notify_error(e.what());
        }
    }

    void closed() override {
        std::shared_ptr<core::run_handle> h;
        {
            std::lock_guard lock(mutex_);
            closed_ = true;
            h = handle_;
        }
        timer_.cancel();
        if (h) h->abandon();
    }

    // run_observer
    void admitted() override {
        send({{"type", "runtime"}, {"language", rt_.language}, {"version", rt_.version}});
    }
    void stage(core::stage_kind s) override { send({{"type", "stage"}, {"stage", core::to_string(s)}}); }
    void data(core::stage_kind, bool is_stderr, const std::string& bytes) override {
        send({{"type", "data"}, {"stream", is_stderr ? "stderr" : "stdout"}, {"data", valid_utf8(bytes)}});
    }
    void stage_done(core::stage_kind s, const core::stage_result& r) override {
        auto j = stage_json(r);
        j.erase("stdout");
        j.erase("stderr");
        j.erase("output");
        j["type"] = "exit";
        j["stage"] = core::to_string(s);
        send(j);
    }
    void done(core::run_result) override { link_->close_with_code(ws_job_completed, "Job Completed"); }
    void failed(unsigned, std::string message, std::optional<std::chrono::seconds>) override {
        std::lock_guard lock(mutex_);
        notify_error(message);
    }

private:
    void send(const json& j) { link_->send(j.dump(-1, ' ', false, json::error_handler_t::replace)); }
    // Piston notifies over the socket, then closes: a close reason holds 123 bytes.
    void notify_error(const std::string& message) {
        send({{"type", "error"}, {"message", message}});
        link_->close_with_code(ws_notified_error, "Notified Error");
    }

    std::shared_ptr<connect_context> c_;
    std::shared_ptr<socket_link> link_;
    const std::string tenant_;
    boost::asio::steady_timer timer_;
    std::mutex mutex_;
    bool initialized_ = false, closed_ = false;
    core::runtime rt_;
    std::shared_ptr<core::run_handle> handle_;
};

}  // namespace

std::shared_ptr<void> register_piston_api(router& r, kit::services& s, core::runs& runs, core::runtime_table& runtimes,
                                          piston_options options) {
    auto c = std::make_shared<connect_context>(connect_context{s, runs, runtimes, std::move(options)});
    // A tenant's token, as on every door; without one, the operator's
    // anonymous tenant when there is one.
    route_guard guard = [c](request_context& ctx, const authenticator& auth) -> std::optional<response> {
        const auto who = auth.check(ctx.req, ctx.query);
        if (who.status == authenticator::outcome::ok) {
            ctx.who = who.who;
            return std::nullopt;
        }
        if (who.status == authenticator::outcome::wrong) return error_response(403, "Invalid token");
        if (c->options.anonymous_tenant.empty())
            return error_response(401, "Authentication required: send 'Authorization: token <token>'");
        ctx.who = identity{c->options.anonymous_tenant, "piston-anonymous", false};
        return std::nullopt;
    };
    for (const std::string prefix : {"/api/v2", "/api/v2/piston"}) {
        r.add_guarded(bhttp::verb::get, prefix + "/runtimes", guard, [c](const request_ptr& req, reply_fn reply) {
            json out = json::array();
            for (const auto& rt : c->runtimes.list(req->who.tenant)) {
                json j = {{"language", rt.language}, {"version", rt.version}, {"aliases", rt.aliases}};
                if (!rt.toolchain.empty()) j["runtime"] = rt.toolchain;
                out.push_back(std::move(j));
            }
            reply(json_response(200, out));
        });
        r.add_guarded(bhttp::verb::post, prefix + "/execute", guard, [c](const request_ptr& req, reply_fn reply) {
            const auto body = json_body_of(req);
            core::run_request job;
            try {
                job = job_from(body, c->runtimes, req->who.tenant, c->options);
            } catch (const job_error& e) {
                throw api_exception(400, e.what());
            }
            auto rt = job.rt;
            c->runs.start(std::move(job), std::make_shared<execute_observer>(std::move(reply), std::move(rt)));
        });
        r.add_guarded(bhttp::verb::get, prefix + "/packages", guard, [c](const request_ptr& req, reply_fn reply) {
            json out = json::array();
            for (const auto& rt : c->runtimes.list(req->who.tenant))
                out.push_back({{"language", rt.language}, {"language_version", rt.version}, {"installed", true}});
            reply(json_response(200, out));
        });
        auto package_of = [c](const request_ptr& req) {
            const auto body = json_body_of(req);
            const auto language = body.is_object() ? body.value("language", std::string()) : std::string();
            const auto version = body.is_object() ? body.value("version", std::string()) : std::string();
            auto rt = c->runtimes.find(req->who.tenant, language, version.empty() ? "*" : version);
            if (!rt) throw api_exception(404, "Requested package " + language + "-" + version + " does not exist");
            return *rt;
        };
        r.add_guarded(bhttp::verb::post, prefix + "/packages", guard, [package_of](const request_ptr& req, reply_fn reply) {
            const auto rt = package_of(req);
            reply(json_response(200, {{"language", rt.language}, {"version", rt.version}}));
        });
        r.add_guarded(bhttp::verb::delete_, prefix + "/packages", guard, [package_of](const request_ptr& req, reply_fn reply) {
            const auto rt = package_of(req);
            reply(error_response(409, "The runtime " + rt.language + "-" + rt.version + " is " +
                                          (rt.owner.empty() ? "built in" : "a template's: delete the template") +
                                          "; it cannot be uninstalled here"));
        });
        r.add_socket(prefix + "/connect", [c](const request_ptr& req) {
            return socket_accept{std::nullopt, [c, tenant = req->who.tenant](std::shared_ptr<socket_link> link) -> std::shared_ptr<socket_peer> {
                auto peer = std::make_shared<connect_peer>(c, std::move(link), tenant);
                peer->start();
                return peer;
            }};
        }, guard);
    }
    return c;
}

}  // namespace cellgate::piston
