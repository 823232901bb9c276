// The E2B control plane: sandboxes created, found, listed, timed and killed.
// A sandbox is a cellgate session; its E2B record (sandbox_book) holds what
// E2B adds: template, metadata, environment, tokens and the end time.
#include "e2b/surface.hpp"

#include "api/network.hpp"
#include "api/request_models.hpp"
#include "util/api_error.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

namespace cellgate::e2b {

using namespace http;
using nlohmann::json;

namespace {

constexpr std::size_t max_metadata_entries = 64, max_metadata_bytes = 16u << 10;
constexpr std::size_t max_env_entries = 256, max_env_bytes = 256u << 10;

// A bounded object of strings (metadata, envVars).
std::map<std::string, std::string> string_map(const json& body, const char* key, std::size_t max_entries,
                                              std::size_t max_bytes) {
    auto out = api::string_object(body, key, key);
    std::size_t bytes = 0;
    for (const auto& [name, value] : out) bytes += name.size() + value.size();
    if (out.size() > max_entries || bytes > max_bytes)
        throw api_exception(400, std::string("'") + key + "' holds more than " + std::to_string(max_entries) +
                                     " entries or " + std::to_string(max_bytes) + " bytes");
    return out;
}

// "timeout" in seconds, 1 … the agent surface's maximum lifetime.
std::optional<std::chrono::seconds> timeout_of(const json& body, const agent::agent_limits& limits) {
    const auto it = body.find("timeout");
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer() && !it->is_number_unsigned()) throw api_exception(400, "'timeout' must be a whole number of seconds");
    const auto t = it->get<long long>();
    const auto max = limits.maxima.lifetime.count();
    if (t < 1 || t > max)
        throw api_exception(400, "'timeout' must be between 1 and " + std::to_string(max) + " seconds");
    return std::chrono::seconds(t);
}

// E2B's templates: the code interpreter's and the base one are the default
// kernelspec; a kernelspec may also be named directly.
std::string spec_for_template(const surface& e, const std::string& template_id) {
    const auto& specs = e.services.kernels.specs();
    if (template_id.empty() || template_id == "code-interpreter-v1" || template_id == "code-interpreter" ||
        template_id == "base")
        return specs.default_name();
    if (specs.find(template_id) != nullptr) return template_id;
    throw api_exception(404, "Template '" + template_id.substr(0, 100) + "' not found (cellgate serves code-interpreter-v1, base and its kernelspecs)");
}

std::string template_of(const json& body) {
    const auto it = body.find("templateID");
    if (it == body.end() || it->is_null()) return "code-interpreter-v1";
    if (!it->is_string()) throw api_exception(400, "'templateID' must be a string");
    return it->get<std::string>();
}

// The session lives until end_at: its lifetime counts from its creation.
void apply_end(const kernels::kernel_ptr& k, sys_clock::time_point end_at) {
    auto p = k->policy();
    const auto left = std::chrono::ceil<std::chrono::seconds>(end_at - k->created());
    p.lifetime = std::max(left, std::chrono::seconds(1));
    p.idle_timeout = std::chrono::seconds(0);  // E2B ends a sandbox at its timeout, idle or not
    k->set_policy(p);
}

json limits_of(const surface& e, const kernels::kernel& k) {
    json out = {{"cpuCount", 1}, {"memoryMB", 0}, {"diskSizeMB", 0}};
    if (const auto* spec = e.services.kernels.specs().find(k.spec_name())) {
        out["cpuCount"] = std::max<std::uint32_t>(1, (spec->limits.cpu_millis + 999) / 1000);
        out["memoryMB"] = spec->limits.memory_bytes >> 20;
        out["diskSizeMB"] = spec->limits.workspace_bytes >> 20;
    }
    return out;
}

// What create and connect return: the SDK's Sandbox.
json sandbox_json(const surface& e, const sandbox_record& r) {
    return {{"templateID", r.template_id},
            {"sandboxID", r.id},
            {"alias", r.template_id},
            {"clientID", r.client_id},
            {"envdVersion", e.options.envd_version},
            {"envdAccessToken", r.envd_token},
            {"trafficAccessToken", r.traffic_token},
            {"domain", e.options.domain.empty() ? json(nullptr) : json(e.options.domain)}};
}

// What get and list return: SandboxDetail / ListedSandbox.
json detail_json(const surface& e, const sandbox_record& r, const kernels::kernel& k, bool with_token) {
    json d = {{"templateID", r.template_id},
              {"alias", r.template_id},
              {"sandboxID", r.id},
              {"clientID", r.client_id},
              {"startedAt", kernels::iso8601(r.started)},
              {"endAt", kernels::iso8601(r.end_at)},
              {"state", k.state() == kernels::kernel_state::paused ? "paused" : "running"},
              {"envdVersion", e.options.envd_version},
              {"metadata", r.metadata}};
    d.update(limits_of(e, k));
    if (with_token) d["envdAccessToken"] = r.envd_token;
    if (!e.options.domain.empty()) d["domain"] = e.options.domain;
    return d;
}

// The caller's sandbox: its record and its live session, or 404.
std::pair<sandbox_record, kernels::kernel_ptr> owned(surface& e, const request_ptr& req) {
    const auto& id = req->param("id");
    auto r = e.book.find(req->who.tenant, id);
    auto k = r ? e.services.kernels.find(req->who.tenant, id) : nullptr;
    if (!r || !k) throw api_exception(404, "Sandbox '" + id.substr(0, 64) + "' not found");
    return {std::move(*r), std::move(k)};
}

// Sets the environment a sandbox was created with in its kernel (commands
// get it with every process).
void apply_env(const kernels::kernel_ptr& k, const std::map<std::string, std::string>& env) {
    if (env.empty()) return;
    k->run_silent("__import__('os').environ.update(__import__('json').loads(" + json(json(env).dump()).dump() + "))",
                  [](const json&) {});
}

// E2B's egress fields as a cellgate network: `network.allowOut` and
// `denyOut` (IPs, CIDRs, names, *. wildcards) become allow and deny. A
// sandbox without them has no way out, whatever `allow_internet_access`
// says (cellgate's default is deny-all; docs/egress.md). A deny-everything
// entry (0.0.0.0/0, ::/0) is the default already and is dropped, since here
// a deny entry would beat every allow (in E2B, allowOut wins).
std::optional<json> e2b_network(const json& body) {
    if (!body.is_object()) return std::nullopt;
    const auto n = body.find("network");
    if (n == body.end() || !n->is_object()) return std::nullopt;
    const auto list = [&](const char* key) {
        json out = json::array();
        if (const auto it = n->find(key); it != n->end()) {
            if (!it->is_array()) throw api_exception(400, std::string("'network.") + key + "' must be an array");
            for (const auto& v : *it)
                if (!(v.is_string() && (v == "0.0.0.0/0" || v == "::/0") && std::string(key) == "denyOut")) out.push_back(v);
        }
        return out;
    };
    if (!n->contains("allowOut") && !n->contains("denyOut")) return std::nullopt;
    return json{{"allow", list("allowOut")}, {"deny", list("denyOut")}};
}

void create(surface& e, const request_ptr& req, reply_fn reply) {
    const auto body = req->json_body();
    if (!body.is_object() && !body.is_null()) throw api_exception(400, "The body must be a JSON object");
    const auto template_id = template_of(body);
    const auto spec = spec_for_template(e, template_id);
    const auto timeout = timeout_of(body, e.agents.limits()).value_or(e.options.default_timeout);
    auto metadata = string_map(body, "metadata", max_metadata_entries, max_metadata_bytes);
    auto env = string_map(body, "envVars", max_env_entries, max_env_bytes);
    if (const auto why = agent::check_cell_env(env); !why.empty()) throw api_exception(400, "'envVars': " + why);
    auto policy = e.services.kernels.config().policies.resolve(kernels::surface::agent, spec, req->who.tenant);
    policy.idle_timeout = std::chrono::seconds(0);
    policy.lifetime = timeout;
    // autoPause: the timeout pauses the sandbox instead of killing it; a
    // connect resumes it (autoResume, or E2B's default of resuming on connect).
    if (const auto it = body.is_object() ? body.find("autoPause") : body.end(); it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) throw api_exception(400, "'autoPause' must be true or false");
        policy.pause_at_end = it->get<bool>();
    }
    if (auto n = e2b_network(body)) {
        static const api::network_settings none;
        policy.network = api::normalize_network(*n, e.services.network ? *e.services.network : none);
    }
    e.services.kernels.start_kernel(
        req->who.tenant, spec, {},
        [&e, reply, template_id, timeout, metadata = std::move(metadata), env = std::move(env)](
            std::optional<kernels::failure> f, kernels::kernel_ptr k) {
            if (f) return reply(api::failure_response(*f));
            sandbox_record r;
            r.id = k->id();
            r.tenant = k->tenant();
            r.template_id = template_id;
            r.client_id = "cellgate";
            r.envd_token = make_access_token();
            r.traffic_token = make_access_token();
            r.metadata = metadata;
            r.env_vars = env;
            r.started = sys_clock::now();
            r.end_at = r.started + timeout;
            apply_end(k, r.end_at);  // a warm sandbox's clock started before this claim
            e.book.put(r);
            apply_env(k, r.env_vars);
            spdlog::info("e2b: sandbox {} created for tenant {} (template {}, timeout {} s)", r.id, r.tenant,
                         template_id, timeout.count());
            reply(json_response(201, sandbox_json(e, r)));  // the Python SDK reads only a 201
        },
        policy);
}

// Connect (and the older resume): a paused sandbox is resumed first, with its
// timeout counted again from now, and answers 201 as E2B's resume does.
void connect(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);
    const auto body = req->json_body();
    const bool paused = k->state() == kernels::kernel_state::paused;
    auto t = body.is_object() ? timeout_of(body, e.agents.limits()) : std::nullopt;
    if (paused && !t) t = e.options.default_timeout;
    if (t) {
        // Connecting never shortens a sandbox's life; resuming starts its clock again.
        r.end_at = paused ? sys_clock::now() + *t : std::max(r.end_at, sys_clock::now() + *t);
        apply_end(k, r.end_at);
        e.book.put(r);
    }
    if (!paused) return reply(json_response(200, sandbox_json(e, r)));
    e.services.kernels.resume(k, [&e, r, reply](std::optional<kernels::failure> f) {
        reply(f ? api::failure_response(*f) : json_response(201, sandbox_json(e, r)));
    });
}

void pause(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);
    if (k->state() == kernels::kernel_state::paused)
        throw api_exception(409, "Sandbox '" + r.id + "' is already paused");
    e.services.kernels.pause(k, [reply](std::optional<kernels::failure> f) {
        reply(f ? api::failure_response(*f) : empty_response(204));
    });
}

void set_timeout(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);
    const auto body = req->json_body(false);
    const auto t = body.is_object() ? timeout_of(body, e.agents.limits()) : std::nullopt;
    if (!t) throw api_exception(400, "'timeout' (seconds) is required");
    r.end_at = sys_clock::now() + *t;  // from now, as E2B: may shorten it too
    apply_end(k, r.end_at);
    e.book.put(r);
    reply(empty_response(204));
}

void kill(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);  // the JS SDK reads a 404's body: {"code": 404}
    e.services.sessions.remove_for_kernel(k->id());
    e.services.kernels.shutdown(k, [reply](std::optional<kernels::failure> f) {
        reply(f ? api::failure_response(*f) : empty_response(204));
    }, "sandbox killed (E2B)");
}

// ?metadata=k%3Dv%26k2%3Dv2 — a query string inside a query value.
std::map<std::string, std::string> metadata_filter(const request_context& ctx) {
    const auto q = ctx.query_value("metadata");
    if (!q || q->empty()) return {};
    return parse_query(*q);
}

bool matches(const sandbox_record& r, const std::map<std::string, std::string>& filter) {
    for (const auto& [k, v] : filter) {
        const auto it = r.metadata.find(k);
        if (it == r.metadata.end() || it->second != v) return false;
    }
    return true;
}

// The caller's running sandboxes that match, oldest first; `page` pages by
// the last id seen (X-Next-Token).
void list(surface& e, const request_ptr& req, reply_fn reply, bool paged) {
    const auto filter = metadata_filter(*req);
    // ?state=running,paused (either or both; neither named: both).
    bool want_running = true, want_paused = true;
    if (const auto state = req->query_value("state"); state && !state->empty()) {
        want_running = state->find("running") != std::string::npos;
        want_paused = state->find("paused") != std::string::npos;
    }
    auto records = e.book.list(req->who.tenant);
    std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) {
        return a.started != b.started ? a.started < b.started : a.id < b.id;
    });
    std::size_t limit = e.options.max_page;
    if (const auto l = req->query_value("limit"); l && !l->empty()) {
        std::size_t n = 0;
        const auto [end, ec] = std::from_chars(l->data(), l->data() + l->size(), n);
        if (ec != std::errc() || end != l->data() + l->size() || n == 0)
            throw api_exception(400, "'limit' must be a positive whole number");
        limit = std::min(n, e.options.max_page);
    }
    const auto after = req->query_value("nextToken").value_or("");
    bool skipping = paged && !after.empty();
    json out = json::array();
    std::string last;
    bool more = false;
    for (const auto& r : records) {
        if (skipping) {
            if (r.id == after) skipping = false;
            continue;
        }
        if (!matches(r, filter)) continue;
        const auto k = e.services.kernels.find(req->who.tenant, r.id);
        if (!k) continue;
        if (!(k->state() == kernels::kernel_state::paused ? want_paused : want_running)) continue;
        if (paged && out.size() == limit) {
            more = true;
            break;
        }
        out.push_back(detail_json(e, r, *k, false));
        last = r.id;
    }
    auto res = json_response(200, out);
    if (more) res.headers.emplace_back("X-Next-Token", last);
    reply(std::move(res));
}

}  // namespace

void register_control_plane(router& r, surface& e) {
    auto add = [&r](bhttp::verb v, const std::string& pattern, handler_fn h) {
        r.add_guarded(v, "/e2b" + pattern, control_guard, rest_handler(std::move(h)));
    };
    auto created = [&e](const request_ptr& req, reply_fn reply) { create(e, req, std::move(reply)); };
    add(bhttp::verb::post, "/sandboxes", created);
    add(bhttp::verb::post, "/v2/sandboxes", created);
    auto connected = [&e](const request_ptr& req, reply_fn reply) { connect(e, req, std::move(reply)); };
    add(bhttp::verb::post, "/sandboxes/{id}/connect", connected);
    add(bhttp::verb::post, "/v2/sandboxes/{id}/connect", connected);
    add(bhttp::verb::post, "/sandboxes/{id}/resume", connected);
    add(bhttp::verb::post, "/sandboxes/{id}/pause",
        [&e](const request_ptr& req, reply_fn reply) { pause(e, req, std::move(reply)); });
    add(bhttp::verb::post, "/sandboxes/{id}/timeout",
        [&e](const request_ptr& req, reply_fn reply) { set_timeout(e, req, std::move(reply)); });
    add(bhttp::verb::delete_, "/sandboxes/{id}", [&e](const request_ptr& req, reply_fn reply) { kill(e, req, std::move(reply)); });
    add(bhttp::verb::get, "/sandboxes/{id}", [&e](const request_ptr& req, reply_fn reply) {
        auto [rec, k] = owned(e, req);
        reply(json_response(200, detail_json(e, rec, *k, true)));
    });
    add(bhttp::verb::get, "/sandboxes", [&e](const request_ptr& req, reply_fn reply) { list(e, req, std::move(reply), false); });
    add(bhttp::verb::get, "/v2/sandboxes", [&e](const request_ptr& req, reply_fn reply) { list(e, req, std::move(reply), true); });

    // A session that ends, however (kill, timeout, its tenant's other
    // surfaces), takes its record with it; records of sessions an earlier
    // gateway ran are kept when the session was taken back.
    e.services.kernels.on_removed([&e](const std::string& id) { e.book.forget(id); });
    for (const auto& rec : e.book.load()) {
        if (auto k = e.services.kernels.find(rec.tenant, rec.id)) apply_end(k, rec.end_at);
        else e.book.forget(rec.id);
    }
}

}  // namespace cellgate::e2b
