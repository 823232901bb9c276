// /v1 snapshots and fork: a named, immutable copy of a session's workspace
// taken while it runs; sessions started from it; a fork (snapshot + N
// children) in one call. See docs/agent-api.md "Snapshots and fork".
#include "agent/agent_service.hpp"
#include "api/api.hpp"
#include "util/api_error.hpp"

namespace cellgate::api {

using namespace http;
using nlohmann::json;

namespace {

kernels::snapshot_record snapshot_or_404(services& s, const request_ptr& req) {
    auto snap = s.kernels.find_snapshot(req->who.tenant, req->param("snapshot"));
    if (!snap) throw api_exception(404, "No such snapshot");
    return *snap;
}

}  // namespace

// An optional snapshot name: what its owner calls it (ids stay UUIDs).
std::string snapshot_name(const json& body) {
    const auto it = body.find("name");
    if (it == body.end() || it->is_null()) return {};
    if (!it->is_string()) throw api_exception(400, "'name' must be a string");
    auto name = it->get<std::string>();
    if (name.empty() || name.size() > 128) throw api_exception(400, "'name' must have 1 to 128 characters");
    for (const char ch : name)
        if (const auto c = static_cast<unsigned char>(ch); c < 0x20 || c == 0x7f) throw api_exception(400, "'name' must not hold control characters");
    return name;
}

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
        const auto b = req->json_body();  // none at all: the defaults
        if (!b.is_object()) throw api_exception(400, "The body must be a JSON object");
        only_members(b, {"name"}, "a snapshot request (name)");
        s.kernels.snapshot(k, snapshot_name(b), [reply](std::optional<kernels::failure> f, kernels::snapshot_record snap) {
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
        const auto b = req->json_body();  // none at all: the defaults
        if (!b.is_object()) throw api_exception(400, "The body must be a JSON object");
        only_members(b, {"count", "name"}, "a fork request (count, name)");
        std::size_t count = 1;
        if (const auto it = b.find("count"); it != b.end() && !it->is_null()) {
            if (!it->is_number_unsigned() || it->get<std::uint64_t>() < 1 || it->get<std::uint64_t>() > max_fork_children)
                throw api_exception(400, "'count' must be a whole number from 1 to " + std::to_string(max_fork_children));
            count = it->get<std::size_t>();
        }
        s.kernels.fork(k, count, snapshot_name(b),
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

}  // namespace cellgate::api
