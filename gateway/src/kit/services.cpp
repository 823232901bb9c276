// What every surface's handlers share (kit/services.hpp): the core's
// failures as statuses, the caller's kernel, file work off the io threads,
// the /v1 session model that MCP also shows, and query and Accept parsing.
#include "kit/services.hpp"

#include "kit/request_models.hpp"
#include "util/api_error.hpp"

#include <spdlog/spdlog.h>

#include <charconv>

namespace cellgate::kit {

using namespace http;
using nlohmann::json;

response failure_response(const kernels::failure& f) {
    using kernels::failure_kind;
    switch (f.kind) {
    case failure_kind::no_such_spec:
    case failure_kind::no_such_kernel: return error_response(404, f.message);
    case failure_kind::invalid: return error_response(400, f.message);
    case failure_kind::over_quota: return error_response(429, f.message);
    case failure_kind::unavailable: return error_response(503, f.message);
    case failure_kind::not_running:
    case failure_kind::busy: return error_response(409, f.message);
    case failure_kind::start_failed: break;
    }
    return error_response(500, f.message);
}

response refusal(unsigned status, const std::string& message, std::optional<std::chrono::seconds> retry_after) {
    auto res = error_response(status, message);
    if (retry_after) res.headers.emplace_back("Retry-After", std::to_string(retry_after->count()));
    return res;
}

kernels::kernel_ptr kernel_or_404(services& s, const request_ptr& req, const std::string& id) {
    auto k = s.kernels.find(req->who.tenant, id);
    if (!k) throw api_exception(404, "No such session or kernel: " + id.substr(0, 64));
    return k;
}


void run_file_work(services& s, const request_ptr& req, reply_fn reply, std::function<void(const reply_fn&)> work) {
    auto job = [req, reply, work = std::move(work)] {
        try {
            work(reply);
        } catch (const api_exception& e) {
            reply(error_response(e.status(), e.what()));
        } catch (const nlohmann::json::exception& e) {
            spdlog::info("{} {}: {}", std::string(bhttp::to_string(req->req.method())), req->route, e.what());
            reply(error_response(400, "A field in the request body has the wrong type"));
        } catch (const std::exception& e) {
            spdlog::error("{} {}: handler failed: {}", std::string(bhttp::to_string(req->req.method())), req->route, e.what());
            reply(error_response(500, "Internal error"));
        }
    };
    if (s.file_io == nullptr) return job();
    switch (s.file_io->submit(req->who.tenant, job)) {
    case util::file_io_pool::admission::accepted: return;
    case util::file_io_pool::admission::tenant_busy: {
        auto res = error_response(429, "Too many file operations of this tenant are waiting; try again shortly");
        res.headers.emplace_back("Retry-After", "1");
        return reply(std::move(res));
    }
    case util::file_io_pool::admission::pool_busy: {
        auto res = error_response(503, "The gateway has too many file operations waiting; try again shortly");
        res.headers.emplace_back("Retry-After", "1");
        return reply(std::move(res));
    }
    }
}


std::function<std::string(const std::string&, std::string_view)> whole_output_at(const std::string& session_id) {
    return [session_id](const std::string& execution_id, std::string_view stream) {
        return "GET /v1/sessions/" + session_id + "/executions/" + execution_id + "/output?stream=" + std::string(stream);
    };
}

json session_model(const kernels::kernel& k, const kernels::kernelspec* spec) {
    const auto model = k.model();
    const auto& p = k.policy();
    json limits = {{"timeout_s", p.exec_timeout.count()},
                   {"idle_timeout_s", p.idle_timeout.count()},
                   {"lifetime_s", p.lifetime.count()},
                   {"output_limit_bytes", p.output_limit_bytes},
                   {"result_limit_bytes", p.result_limit_bytes},
                   {"upload_limit_bytes", p.upload_limit_bytes}};
    if (spec != nullptr) {
        limits["memory_bytes"] = spec->limits.memory_bytes;
        limits["cpu_millis"] = spec->limits.cpu_millis;
        limits["pids"] = spec->limits.pids;
        limits["workspace_bytes"] = spec->limits.workspace_bytes;
    }
    return {{"id", k.id()},
            {"kernel", k.spec_name()},
            {"state", model["execution_state"]},
            {"created", kernels::iso8601(k.created())},
            {"last_activity", model["last_activity"]},
            {"expires_at", p.lifetime.count() > 0 ? json(kernels::iso8601(k.created() + p.lifetime)) : json(nullptr)},
            {"limits", limits},
            {"lifecycle", {{"on_idle", p.pause_on_idle ? "pause" : "delete"}, {"auto_resume", p.auto_resume}}},
            {"pause", k.pause_model()},
            {"origin", k.origin()},
            {"sandbox", model["cellgate"]["sandbox"]},
            {"volumes", [&] {
                 json out = json::array();
                 for (const auto& v : p.volumes) out.push_back({{"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
                 return out;
             }()}};
}

void start_agent_session(services& s, const std::string& tenant, const json& body, kernels::kernel_manager::done_kernel done) {
    s.core->start(session_request_from(body, tenant), std::move(done));
}

bool wants_event_stream(const request_ptr& req) {
    const auto accept = req->req[bhttp::field::accept];
    return std::string_view(accept.data(), accept.size()).find("text/event-stream") != std::string_view::npos;
}


std::uint64_t query_number(const request_ptr& req, const char* name, std::uint64_t fallback, std::uint64_t max) {
    const auto v = req->query_value(name);
    if (!v || v->empty()) return fallback;
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || end != v->data() + v->size() || n > max)
        throw api_exception(400, std::string("'") + name + "' must be a whole number up to " + std::to_string(max));
    return n;
}

}  // namespace cellgate::kit
