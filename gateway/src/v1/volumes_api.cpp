// /v1 named volumes: per-token, size-capped file systems that outlive
// sessions. POST/GET/DELETE /v1/volumes; a session mounts them at start
// (`volumes: [{name, path?, read_only?}]` in POST /v1/sessions), one writer
// at a time. See docs/agent-api.md "Volumes".
#include "agent/agent_service.hpp"
#include "v1/v1_api.hpp"
#include "util/api_error.hpp"

namespace cellgate::v1 {

using namespace kit;

using namespace http;
using nlohmann::json;

namespace {

constexpr std::uint64_t min_volume_bytes = 8ull << 20, max_volume_bytes = 64ull << 30;

json volume_model(services& s, const kernels::volume_record& v) {
    const auto use = s.kernels.volume_usage(v.id);
    json users = json::array();
    for (const auto& [session, a] : s.kernels.volume_users(v.id))
        users.push_back({{"session", session}, {"path", a.path}, {"read_only", a.read_only}});
    return {{"name", v.name},
            {"size_bytes", v.bytes},
            {"used_bytes", use.used_bytes},
            {"created", kernels::iso8601(v.created)},
            {"mounts", users}};
}

}  // namespace

void register_volumes(router& r, services& s) {
    r.add(bhttp::verb::post, "/v1/volumes", [&s](const request_ptr& req, reply_fn reply) {
        const auto b = req->json_body(false);
        if (!b.is_object()) throw api_exception(400, "The body must be a JSON object {name, size_bytes?}");
        only_members(b, {"name", "size_bytes"}, "a volume request (name, size_bytes)");
        if (!b.contains("name") || !b["name"].is_string() || !is_volume_name(b["name"].get<std::string>()))
            throw api_exception(400, "'name' is 1 to 64 letters, digits, '-' and '_'");
        std::uint64_t bytes = 1ull << 30;
        if (b.contains("size_bytes") && !b["size_bytes"].is_null()) {
            if (!b["size_bytes"].is_number_unsigned() || b["size_bytes"].get<std::uint64_t>() < min_volume_bytes ||
                b["size_bytes"].get<std::uint64_t>() > max_volume_bytes)
                throw api_exception(400, "'size_bytes' must be a whole number from 8 MiB (8388608) to 64 GiB");
            bytes = b["size_bytes"].get<std::uint64_t>();
        }
        s.kernels.create_volume(req->who.tenant, b["name"].get<std::string>(), bytes,
                                [&s, req, reply](std::optional<kernels::failure> f, kernels::volume_record v) {
                                    if (f) return reply(failure_response(*f));
                                    run_file_work(s, req, reply, [&s, v](const reply_fn& rep) {
                                        auto res = json_response(201, volume_model(s, v));
                                        res.headers.emplace_back("Location", "/v1/volumes/" + v.name);
                                        rep(std::move(res));
                                    });
                                });
    });
    r.add(bhttp::verb::get, "/v1/volumes", [&s](const request_ptr& req, reply_fn reply) {
        run_file_work(s, req, std::move(reply), [&s, req](const reply_fn& rep) {
            json list = json::array();
            for (const auto& v : s.kernels.volumes(req->who.tenant)) list.push_back(volume_model(s, v));
            rep(json_response(200, {{"volumes", list}}));
        });
    });
    r.add(bhttp::verb::get, "/v1/volumes/{name}", [&s](const request_ptr& req, reply_fn reply) {
        const auto v = s.kernels.find_volume(req->who.tenant, req->param("name"));
        if (!v) throw api_exception(404, "No such volume");
        run_file_work(s, req, std::move(reply), [&s, v = *v](const reply_fn& rep) { rep(json_response(200, volume_model(s, v))); });
    });
    r.add(bhttp::verb::delete_, "/v1/volumes/{name}", [&s](const request_ptr& req, reply_fn reply) {
        s.kernels.delete_volume(req->who.tenant, req->param("name"), [reply](std::optional<kernels::failure> f) {
            reply(f ? failure_response(*f) : empty_response(204));
        });
    });
}

}  // namespace cellgate::v1
