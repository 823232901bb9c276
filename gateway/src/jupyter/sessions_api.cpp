#include "jupyter/jupyter_api.hpp"
#include "util/api_error.hpp"

namespace cellgate::jupyter {

using namespace kit;

using namespace http;

namespace {

nlohmann::json session_model(services& s, const kernels::session_record& rec) {
    nlohmann::json kernel = nullptr;
    if (auto k = s.kernels.find(rec.tenant, rec.kernel_id)) kernel = k->model();
    nlohmann::json m = {{"id", rec.id}, {"path", rec.path}, {"name", rec.name}, {"type", rec.type}, {"kernel", kernel}};
    if (rec.type == "notebook") m["notebook"] = {{"path", rec.path}, {"name", rec.name}};
    return m;
}

// Resolves the "kernel" member of a session request: an existing kernel by id,
// or a spec name to start. Calls back with the kernel or an error.
void resolve_kernel(services& s, const request_ptr& req, const nlohmann::json& body,
                    std::function<void(std::optional<kernels::failure>, kernels::kernel_ptr)> then) {
    const auto kernel = kernel_member(body);
    const auto id = string_field(kernel, "id");
    if (!id.empty()) {
        auto k = s.kernels.find(req->who.tenant, id);
        if (!k) throw api_exception(404, "No such kernel: " + id.substr(0, 64));
        then(std::nullopt, k);
        return;
    }
    auto ask = core::session_for(req->who.tenant, kernels::surface::jupyter);
    ask.kernelspec = string_field(kernel, "name");
    ask.env = kernel_env_from(kernel);
    s.core->start(ask, std::move(then));
}

}  // namespace

void register_sessions_api(router& r, services& s) {
    r.add(bhttp::verb::get, "/api/sessions", [&s](const request_ptr& req, reply_fn reply) {
        auto list = nlohmann::json::array();
        for (const auto& rec : s.sessions.list(req->who.tenant)) list.push_back(session_model(s, rec));
        reply_list(s, req, std::move(reply), std::move(list));
    });
    r.add(bhttp::verb::post, "/api/sessions", [&s](const request_ptr& req, reply_fn reply) {
        const auto body = req->json_body(false);
        auto fields = session_fields_from(body);
        kernels::session_record rec;
        rec.tenant = req->who.tenant;
        rec.path = std::move(fields.path);
        rec.name = std::move(fields.name);
        rec.type = std::move(fields.type);
        if (auto existing = s.sessions.find_by_path(rec.tenant, rec.path)) {
            if (s.kernels.find(rec.tenant, existing->kernel_id)) {
                reply(json_response(201, session_model(s, *existing)));
                return;
            }
            s.sessions.remove(rec.tenant, existing->id);
        }
        // Refused before a kernel is started for it; add() checks again (a race).
        if (!s.sessions.has_room(rec.tenant))
            throw api_exception(429, "Session limit reached for this token (" +
                                         std::to_string(s.sessions.max_per_tenant()) + " sessions)");
        resolve_kernel(s, req, body, [&s, rec, reply](std::optional<kernels::failure> e, kernels::kernel_ptr k) mutable {
            if (e) return reply(failure_response(*e));
            rec.kernel_id = k->id();
            const auto added = s.sessions.add(rec);
            if (!added) {
                // Its kernel, if just started for it, stays: the tenant sees it in /api/kernels.
                return reply(error_response(429, "Session limit reached for this token (" +
                                                     std::to_string(s.sessions.max_per_tenant()) + " sessions)"));
            }
            auto res = json_response(201, session_model(s, *added));
            res.headers.emplace_back("Location", "/api/sessions/" + added->id);
            reply(std::move(res));
        });
    });
    r.add(bhttp::verb::get, "/api/sessions/{session_id}", [&s](const request_ptr& req, reply_fn reply) {
        const auto rec = s.sessions.find(req->who.tenant, req->param("session_id"));
        if (!rec) throw api_exception(404, "No such session");
        reply(json_response(200, session_model(s, *rec)));
    });
    r.add(bhttp::verb::patch, "/api/sessions/{session_id}", [&s](const request_ptr& req, reply_fn reply) {
        auto rec = s.sessions.find(req->who.tenant, req->param("session_id"));
        if (!rec) throw api_exception(404, "No such session");
        const auto body = req->json_body(false);
        rec->path = session_field(body, "path", rec->path);
        rec->name = session_field(body, "name", rec->name);
        rec->type = session_field(body, "type", rec->type);
        const auto kernel = body.find("kernel");
        if (kernel == body.end() || kernel->is_null()) {
            s.sessions.update(*rec);
            return reply(json_response(200, session_model(s, *rec)));
        }
        const auto old_kernel = rec->kernel_id;
        resolve_kernel(s, req, body, [&s, rec = *rec, old_kernel, reply](std::optional<kernels::failure> e,
                                                                          kernels::kernel_ptr k) mutable {
            if (e) return reply(failure_response(*e));
            rec.kernel_id = k->id();
            s.sessions.update(rec);
            // The old kernel goes when no other session uses it (as jupyter_server does).
            if (old_kernel != rec.kernel_id && s.sessions.for_kernel(old_kernel).empty())
                if (auto old = s.kernels.find(rec.tenant, old_kernel)) s.kernels.shutdown(old, [](auto) {});
            reply(json_response(200, session_model(s, rec)));
        });
    });
    r.add(bhttp::verb::delete_, "/api/sessions/{session_id}", [&s](const request_ptr& req, reply_fn reply) {
        const auto rec = s.sessions.find(req->who.tenant, req->param("session_id"));
        if (!rec) throw api_exception(404, "No such session");
        s.sessions.remove(rec->tenant, rec->id);
        auto k = s.kernels.find(rec->tenant, rec->kernel_id);
        if (!k || !s.sessions.for_kernel(rec->kernel_id).empty()) return reply(empty_response(204));
        s.kernels.shutdown(k, [reply](std::optional<kernels::failure>) { reply(empty_response(204)); });
    });
}

}  // namespace cellgate::jupyter
