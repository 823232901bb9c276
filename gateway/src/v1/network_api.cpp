#include "v1/v1_api.hpp"
#include "core/network.hpp"
#include "util/api_error.hpp"

namespace cellgate::v1 {

using namespace kit;

using nlohmann::json;
using namespace http;
using core::network_settings;

void register_network_api(router& r, services& s, network_settings& settings) {
    core::keep_egress_log(settings);
    r.add(bhttp::verb::get, "/v1/sessions/{id}/network", [&s, &settings](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto n = core::current_network(*k, settings);
        if (n.is_null()) return reply(json_response(200, {{"enabled", false}}));
        json out = n;
        out["enabled"] = true;
        reply(json_response(200, out));
    });
    r.add(bhttp::verb::patch, "/v1/sessions/{id}/network", [&s, &settings](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto body = req->json_body();
        auto current = core::current_network(*k, settings);
        if (current.is_null())
            throw api_exception(409, "this session was created without a network, so its sandbox has no way out; "
                                     "create a session with \"network\": {\"allow\": []} to change it later");
        if (!body.is_object()) throw api_exception(400, "the body must be an object {allow, deny, preset}");
        // The fields given replace the session's; the others stay.
        json merged = {{"allow", current["allow"]}, {"deny", current["deny"]}, {"presets", current["presets"]}};
        for (const auto& [key, value] : body.items()) merged[key == "preset" ? "presets" : key] = value;
        const auto next = core::normalize_network(merged, settings);
        if (!settings.proxy->set_rules(k->id(), core::rules_for(next, *k, settings)))
            throw api_exception(409, "the session's egress proxy is not running");
        if (settings.store) settings.store->put_record({"network", k->id(), k->id(), next});
        json out = next;
        out["enabled"] = true;
        reply(json_response(200, out));
    });
    r.add(bhttp::verb::get, "/v1/sessions/{id}/network/log", [&s, &settings](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto after = query_number(req, "after", 0, UINT64_MAX);
        const auto limit = query_number(req, "limit", 100, 1000);
        if (limit == 0) throw api_exception(400, "'limit' must be at least 1");
        json list = json::array();
        std::uint64_t last = after;
        if (settings.proxy)
            for (const auto& rec : settings.proxy->log(k->id(), after, limit)) {
                list.push_back(to_json(rec));
                last = rec.seq;
            }
        json out = {{"connections", list}};
        out["next_after"] = list.size() == limit ? json(last) : json(nullptr);
        reply(json_response(200, out));
    });
}

}  // namespace cellgate::v1
