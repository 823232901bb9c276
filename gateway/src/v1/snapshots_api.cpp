// /v1 snapshots and fork: a named, immutable copy of a session's workspace
// taken while it runs; sessions started from it; a fork (snapshot + N
// children) in one call. See docs/agent-api.md "Snapshots and fork".
#include "agent/agent_service.hpp"
#include "v1/v1_api.hpp"
#include "util/api_error.hpp"

namespace cellgate::v1 {

using namespace kit;

using namespace http;
using nlohmann::json;

namespace {

kernels::snapshot_record snapshot_or_404(services& s, const request_ptr& req) {
    auto snap = s.kernels.find_snapshot(req->who.tenant, req->param("snapshot"));
    if (!snap) throw api_exception(404, "No such snapshot");
    return *snap;
}

}  // namespace

json snapshot_model(const kernels::snapshot_record& snap) {
    return {{"id", snap.id},
            {"name", snap.name},
            {"session", snap.source},
            {"kernel", snap.spec_name},
            {"created", kernels::iso8601(snap.created)},
            {"mode", snap.mode},
            {"bytes", snap.bytes},
            {"disk_bytes", snap.disk_bytes},
            {"reflinked", snap.reflinked}};
}

void register_snapshots(router& r, services& s, agent::agent_service&) {
    r.add(bhttp::verb::post, "/v1/sessions/{id}/snapshots", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        s.kernels.snapshot(k, snapshot_request_from(req->json_body()), [reply](std::optional<kernels::failure> f, kernels::snapshot_record snap) {
            if (f) return reply(failure_response(*f));
            auto res = json_response(201, snapshot_model(snap));
            res.headers.emplace_back("Location", "/v1/snapshots/" + snap.id);
            reply(std::move(res));
        });
    });
    r.add(bhttp::verb::get, "/v1/sessions/{id}/snapshots", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        json list = json::array();
        for (const auto& snap : s.kernels.snapshots(req->who.tenant))
            if (snap.source == k->id()) list.push_back(snapshot_model(snap));
        reply(json_response(200, {{"snapshots", list}}));
    });
    r.add(bhttp::verb::get, "/v1/snapshots", [&s](const request_ptr& req, reply_fn reply) {
        json list = json::array();
        for (const auto& snap : s.kernels.snapshots(req->who.tenant)) list.push_back(snapshot_model(snap));
        reply_list(s, req, std::move(reply), {{"snapshots", list}}, "snapshots", "created");
    });
    r.add(bhttp::verb::get, "/v1/snapshots/{snapshot}", [&s](const request_ptr& req, reply_fn reply) {
        reply(json_response(200, snapshot_model(snapshot_or_404(s, req))));
    });
    r.add(bhttp::verb::delete_, "/v1/snapshots/{snapshot}", [&s](const request_ptr& req, reply_fn reply) {
        const auto snap = snapshot_or_404(s, req);
        s.kernels.delete_snapshot(req->who.tenant, snap.id, [reply](std::optional<kernels::failure> f) {
            reply(f ? failure_response(*f) : empty_response(204));
        });
    });
    // Fork: {"count": 1..16, "name"?} → 201 {"snapshot": …, "sessions": [...]}.
    r.add(bhttp::verb::post, "/v1/sessions/{id}/fork", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto asked = fork_request_from(req->json_body());
        s.kernels.fork(k, asked.count, asked.name,
                       [&s, reply](std::optional<kernels::failure> f, kernels::snapshot_record snap,
                                   std::vector<kernels::kernel_ptr> children) {
                           if (f) return reply(failure_response(*f));
                           json sessions = json::array();
                           for (const auto& c : children)
                               sessions.push_back(session_model(*c, s.kernels.specs().find(c->spec_name())));
                           reply(json_response(201, {{"snapshot", snapshot_model(snap)}, {"sessions", sessions}}));
                       });
    });
}

}  // namespace cellgate::v1
