#include "jupyter/jupyter_api.hpp"
#include "kernels/kernel.hpp"

#include <chrono>

namespace cellgate::jupyter {

using namespace kit;

using namespace http;

namespace {
const auto started_at = std::chrono::system_clock::now();
}

void register_misc_api(router& r, services& s) {
    r.add(bhttp::verb::get, "/api", [&s](const request_ptr&, reply_fn reply) {
        reply(json_response(200, {{"version", s.version}, {"server", "cellgate"}}));
    });
    r.add(bhttp::verb::get, "/healthz", [](const request_ptr&, reply_fn reply) {
        // Public: says only that the gateway serves (no counts: review L4).
        reply(json_response(200, {{"status", "ok"}}));
    });
    r.add(bhttp::verb::get, "/api/status", [&s](const request_ptr& req, reply_fn reply) {
        const auto kernels = s.kernels.list(req->who.tenant);
        int connections = 0;
        auto last = started_at;
        for (const auto& k : kernels) connections += k->connections();
        reply(json_response(200, {{"started", kernels::iso8601(started_at)},
                                  {"last_activity", kernels::iso8601(std::max(last, std::chrono::system_clock::now()))},
                                  {"connections", connections},
                                  {"kernels", kernels.size()}}));
    });
    r.add(bhttp::verb::get, "/api/me", [](const request_ptr& req, reply_fn reply) {
        const auto& who = req->who;
        reply(json_response(200, {{"identity",
                                   {{"username", who.token_name},
                                    {"name", who.token_name},
                                    {"display_name", who.token_name},
                                    {"initials", nullptr},
                                    {"avatar_url", nullptr},
                                    {"color", nullptr},
                                    {"tenant", who.tenant}}},
                                  {"permissions", nlohmann::json::object()}}));
    });
    // Counts across every tenant (and per kernel): the operator's only (L4).
    r.add(bhttp::verb::get, "/metrics", [&s](const request_ptr& req, reply_fn reply) {
        if (!req->who.is_operator)
            return reply(error_response(403, "/metrics is for the operator: use the gateway's --token, or a "
                                             "token entry with \"operator\": true"));
        response res;
        res.content_type = "text/plain; version=0.0.4; charset=utf-8";
        res.body = s.metrics.render();
        reply(std::move(res));
    });
}

}  // namespace cellgate::jupyter
