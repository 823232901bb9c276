// The E2B control plane: sandboxes created, found, listed, timed and killed.
// A sandbox is a cellgate session; its E2B record (sandbox_book) holds what
// E2B adds: template, metadata, environment, tokens and the end time.
#include "e2b/surface.hpp"

#include "kit/request_models.hpp"
#include "util/api_error.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <mutex>

namespace cellgate::e2b {

using namespace http;
using nlohmann::json;

namespace {

constexpr std::size_t max_metadata_entries = 64, max_metadata_bytes = 16u << 10;
constexpr std::size_t max_env_entries = 256, max_env_bytes = 256u << 10;

// A bounded object of strings (metadata, envVars).
std::map<std::string, std::string> string_map(const json& body, const char* key, std::size_t max_entries,
                                              std::size_t max_bytes) {
    auto out = kit::string_object(body, key, key);
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

// A sandbox lives at most the agent surface's maximum lifetime from its
// start (or its last resume): connect and setTimeout move its end within
// that, never past it (security review turn 3, L2).
sys_clock::time_point latest_end(const surface& e, const sandbox_record& r) {
    return r.started + e.agents.limits().maxima.lifetime;
}

// E2B's templates: the code interpreter's is the code-interpreter kernelspec
// when the languages image is built (Python, with contexts in R, JavaScript,
// TypeScript and Bash, as E2B's template has), else the default kernelspec;
// the base one is the default kernelspec; a kernelspec may also be named
// directly; and the tenant's own templates by name[:tag] (docs/templates.md).
std::string spec_for_template(const surface& e, const std::string& tenant, const std::string& template_id) {
    const auto& specs = e.services.kernels.specs();
    if (template_id == "code-interpreter-v1" || template_id == "code-interpreter")
        return specs.all().count("code-interpreter") != 0 ? std::string("code-interpreter") : specs.default_name();
    if (template_id.empty() || template_id == "base") return specs.default_name();
    if (specs.find_for(template_id, tenant) != nullptr) return template_id;
    if (e.services.templates)
        if (auto ks = e.services.templates->kernelspec_for(tenant, template_id)) return *ks;
    throw api_exception(404, "Template '" + template_id.substr(0, 100) + "' not found (cellgate serves code-interpreter-v1, base, its kernelspecs and your templates)");
}

std::string template_of(const json& body) {
    const auto it = body.find("templateID");
    if (it == body.end() || it->is_null()) return "code-interpreter-v1";
    if (!it->is_string()) throw api_exception(400, "'templateID' must be a string");
    return it->get<std::string>();
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

// The E2B record of a session just started for the caller: tokens, the end
// of its timeout, its environment applied in its kernel.
sandbox_record admit_sandbox(surface& e, const kernels::kernel_ptr& k, const std::string& template_id,
                             std::chrono::seconds timeout, std::map<std::string, std::string> metadata,
                             std::map<std::string, std::string> env) {
    sandbox_record r;
    r.id = k->id();
    r.tenant = k->tenant();
    r.template_id = template_id;
    r.client_id = "cellgate";
    r.envd_token = make_access_token();
    r.traffic_token = make_access_token();
    r.metadata = std::move(metadata);
    r.env_vars = std::move(env);
    r.started = sys_clock::now();
    r.end_at = r.started + timeout;
    core::sessions::end_at(k, r.end_at);  // a warm sandbox's clock started before this claim
    e.book.put(r);
    apply_env(k, r.env_vars);
    return r;
}

// A template id that names one of the caller's snapshots: its id, or its
// name (E2B's "team/name:tag" forms too: the newest snapshot of that name).
std::optional<kernels::snapshot_record> snapshot_template(const surface& e, const std::string& tenant,
                                                          const std::string& template_id) {
    if (template_id.empty()) return std::nullopt;
    if (auto s = e.services.kernels.find_snapshot(tenant, template_id)) return s;
    auto name = std::string_view(template_id);
    if (const auto slash = name.rfind('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
    if (const auto colon = name.find(':'); colon != std::string_view::npos) name = name.substr(0, colon);
    std::optional<kernels::snapshot_record> newest;
    for (auto& s : e.services.kernels.snapshots(tenant))
        if (!s.name.empty() && (s.name == name || s.name == template_id) && (!newest || s.created >= newest->created))
            newest = std::move(s);
    return newest;
}

void create(surface& e, const request_ptr& req, reply_fn reply) {
    const auto body = req->json_body();
    if (!body.is_object() && !body.is_null()) throw api_exception(400, "The body must be a JSON object");
    const auto template_id = template_of(body);
    // A snapshot another node took (its id names the node): created there.
    if (kit::relay_to_maker(e.services, req, template_id, reply)) return;
    const auto snap = snapshot_template(e, req->who.tenant, template_id);
    const auto spec = snap ? snap->spec_name : spec_for_template(e, req->who.tenant, template_id);
    const auto timeout = timeout_of(body, e.agents.limits()).value_or(e.options.default_timeout);
    auto metadata = string_map(body, "metadata", max_metadata_entries, max_metadata_bytes);
    auto env = string_map(body, "envVars", max_env_entries, max_env_bytes);
    if (const auto why = agent::check_cell_env(env); !why.empty()) throw api_exception(400, "'envVars': " + why);
    // A snapshot's sandboxes run with what its source ran (limits, network).
    // E2B ends a sandbox at its timeout, idle or not.
    auto ask = core::session_for(req->who.tenant);
    if (snap) ask.from_snapshot = snap->id;
    else ask.kernelspec = spec;
    ask.limits.lifetime = timeout;
    ask.limits.idle_timeout = std::chrono::seconds(0);
    // autoPause: the timeout pauses the sandbox instead of killing it; a
    // connect resumes it (autoResume, or E2B's default of resuming on connect).
    if (const auto it = body.is_object() ? body.find("autoPause") : body.end(); it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) throw api_exception(400, "'autoPause' must be true or false");
        ask.pause_at_end = it->get<bool>();
    }
    if (auto n = e2b_network(body)) {
        if (snap)
            throw api_exception(400, "'network' cannot be given with a snapshot's template: its sandboxes keep the "
                                     "network of the sandbox it was taken from");
        ask.network = std::move(*n);
    }
    auto started = [&e, reply, template_id, timeout, metadata = std::move(metadata), env = std::move(env)](
                       std::optional<kernels::failure> f, kernels::kernel_ptr k) mutable {
        if (f) return reply(kit::failure_response(*f));
        const auto r = admit_sandbox(e, k, template_id, timeout, std::move(metadata), std::move(env));
        spdlog::info("e2b: sandbox {} created for tenant {} (template {}, timeout {} s)", r.id, r.tenant,
                     template_id, timeout.count());
        reply(json_response(201, sandbox_json(e, r)));  // the Python SDK reads only a 201
    };
    e.services.core->start(ask, std::move(started));
}

// ?limit=: a page's size, at most (and by default) the surface's maximum.
std::size_t page_limit(const surface& e, const request_context& ctx) {
    const auto l = ctx.query_value("limit");
    if (!l || l->empty()) return e.options.max_page;
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(l->data(), l->data() + l->size(), n);
    if (ec != std::errc() || end != l->data() + l->size() || n == 0)
        throw api_exception(400, "'limit' must be a positive whole number");
    return std::min(n, e.options.max_page);
}

// One page of `items` (sorted oldest first), as E2B's lists answer: after
// ?nextToken (the last id of the previous page), at most ?limit of those
// `render` keeps (it returns nothing for the others), with X-Next-Token when
// more remain. Unpaged: every item kept.
template <class Item, class Render>
response page_of(const surface& e, const request_context& ctx, const std::vector<Item>& items, bool paged,
                 Render render) {
    const auto limit = page_limit(e, ctx);
    const auto after = ctx.query_value("nextToken").value_or("");
    bool skipping = paged && !after.empty();
    json out = json::array();
    std::string last;
    bool more = false;
    for (const auto& item : items) {
        if (skipping) {
            if (item.id == after) skipping = false;
            continue;
        }
        auto rendered = render(item);
        if (!rendered) continue;
        if (paged && out.size() == limit) {
            more = true;
            break;
        }
        out.push_back(std::move(*rendered));
        last = item.id;
    }
    auto res = json_response(200, out);
    if (more) res.headers.emplace_back("X-Next-Token", last);
    return res;
}

// Whether a list answers for this node only: asked by a peer
// (`X-Cellgate-Scope: node`). Such an answer is not paged.
bool node_part_only(const request_context& ctx) {
    return header_value(ctx.req, "x-cellgate-scope") == "node";
}

// A list on a cluster node: the page is cut from the whole cluster's items,
// this node's (`local`, rendered) and those of each peer the index names as
// holding some of the caller's (the same GET, `X-Cellgate-Scope: node`, so
// all of theirs), ordered by `order` then `id` (fields of the items), so a
// nextToken means the same whichever node the next page is asked of.
// An `order` of cluster_order is taken off the items again.
constexpr const char* cluster_order = "cellgate_created";

void reply_cluster_page(surface& e, const request_ptr& req, reply_fn reply, json local, bool paged,
                        const char* order, const char* id) {
    kit::run_file_work(e.services, req, std::move(reply),
                       [&e, req, local = std::move(local), paged, order, id](const reply_fn& rep) mutable {
                           const auto unreachable = kit::join_holders_parts(e.services, req, local);
                           struct item {
                               std::string key, id;
                               json body;
                           };
                           std::vector<item> all;
                           auto add = [&](json& j) {
                               all.push_back({j.value(order, std::string()), j.value(id, std::string()), std::move(j)});
                               if (order == std::string_view(cluster_order)) all.back().body.erase(order);
                           };
                           for (auto& j : local) add(j);
                           std::sort(all.begin(), all.end(), [](const item& a, const item& b) {
                               return a.key != b.key ? a.key < b.key : a.id < b.id;
                           });
                           auto res = page_of(e, *req, all, paged, [](const item& i) { return std::optional(i.body); });
                           if (!unreachable.empty()) res.headers.emplace_back("X-Cellgate-Unreachable", unreachable);
                           rep(std::move(res));
                       });
}

// E2B's SnapshotInfo: the id is what Sandbox.create() takes; names, the
// name it was given (which create takes too).
json snapshot_info(const kernels::snapshot_record& s) {
    json names = json::array();
    if (!s.name.empty()) names.push_back(s.name);
    return {{"snapshotID", s.id}, {"names", names}};
}

// createSnapshot: a snapshot of the sandbox's files (cellgate's mode
// "files"), taken while it runs on. 201 SnapshotInfo.
void create_snapshot(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);
    const auto body = req->json_body();
    if (!body.is_object() && !body.is_null()) throw api_exception(400, "The body must be a JSON object");
    // /v1's check, and what E2B's templates need besides: Sandbox.create()
    // takes the name as a template, so no '/', ':' or spaces, and not
    // another snapshot's id or a built-in template's name.
    const auto name = body.is_object() ? kit::snapshot_name(body) : std::string();
    if (!name.empty()) {
        if (name.find_first_of(" /:") != std::string::npos)
            throw api_exception(400, "'name' must not hold spaces, control characters, '/' or ':'");
        bool built_in = true;
        try {
            spec_for_template(e, req->who.tenant, name);
        } catch (const api_exception&) {
            built_in = false;
        }
        if (built_in || e.services.kernels.find_snapshot(req->who.tenant, name))
            throw api_exception(400, "'name' must not be a built-in template's name or a snapshot id");
    }
    e.services.kernels.snapshot(k, name, [reply](std::optional<kernels::failure> f, kernels::snapshot_record s) {
        reply(f ? kit::failure_response(*f) : json_response(201, snapshot_info(s)));
    });
}

// GET /snapshots?sandboxID=&name=&limit=&nextToken=: the caller's
// snapshots, oldest first, paged by the last id seen (X-Next-Token).
void list_snapshots(surface& e, const request_ptr& req, reply_fn reply) {
    auto all = e.services.kernels.snapshots(req->who.tenant);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
        return a.created != b.created ? a.created < b.created : a.id < b.id;
    });
    const auto source = req->query_value("sandboxID").value_or("");
    const auto name = req->query_value("name").value_or("");
    const auto match = name.empty() ? std::nullopt : snapshot_template(e, req->who.tenant, name);
    const auto render = [&](const kernels::snapshot_record& s) -> std::optional<json> {
        if (!source.empty() && s.source != source) return std::nullopt;
        if (!name.empty() && s.id != name && !(match && !s.name.empty() && s.name == match->name)) return std::nullopt;
        auto info = snapshot_info(s);
        // Not E2B's: what a cluster orders the joined list by (taken off again).
        if (e.services.cluster_peers) info[cluster_order] = kernels::iso8601(s.created);
        return info;
    };
    if (!e.services.cluster_peers) return reply(page_of(e, *req, all, true, render));
    if (node_part_only(*req)) return reply(page_of(e, *req, all, false, render));
    json local = json::array();
    for (const auto& s : all)
        if (auto j = render(s)) local.push_back(std::move(*j));
    reply_cluster_page(e, req, std::move(reply), std::move(local), true, cluster_order, "snapshotID");
}

// DELETE /templates/{id}: a snapshot by id, or every snapshot of a name (a
// template and its builds, in E2B's words). 404 when none: the SDK's false.
void delete_template(surface& e, const request_ptr& req, reply_fn reply) {
    const auto& id = req->param("id");
    // One of the tenant's built templates (every tag of its name, or the one named).
    if (const auto ref = templates::parse_reference(id); ref && e.services.templates) {
        const bool tagged = id.find(':') != std::string::npos;
        std::vector<std::string> tags;
        for (const auto& m : e.services.templates->list(req->who.tenant))
            if (m.value("name", "") == ref->first && (!tagged || m.value("tag", "") == ref->second))
                tags.push_back(m.value("tag", ""));
        if (!tags.empty()) {
            auto* store = e.services.templates;
            return kit::run_file_work(e.services, req, std::move(reply), [store, req, name = ref->first, tags](const reply_fn& rep) {
                for (const auto& t : tags) store->remove(req->who.tenant, name, t);
                rep(empty_response(204));
            });
        }
    }
    std::vector<std::string> ids;
    if (const auto snap = e.services.kernels.find_snapshot(req->who.tenant, id)) ids.push_back(snap->id);
    else if (const auto match = snapshot_template(e, req->who.tenant, id))
        for (const auto& s : e.services.kernels.snapshots(req->who.tenant))
            if (s.name == match->name) ids.push_back(s.id);
    if (ids.empty())
        throw api_exception(404, "Template '" + id.substr(0, 100) +
                                     "' not found among your templates and snapshots (the built in ones cannot be deleted)");
    struct pending {
        std::mutex mutex;
        std::size_t left;
        std::optional<kernels::failure> first;
    };
    auto p = std::make_shared<pending>();
    p->left = ids.size();
    for (const auto& sid : ids)
        e.services.kernels.delete_snapshot(req->who.tenant, sid, [p, reply](std::optional<kernels::failure> f) {
            std::unique_lock lock(p->mutex);
            if (f && !p->first) p->first = std::move(f);
            if (--p->left) return;
            const auto first = std::move(p->first);
            lock.unlock();
            reply(first ? kit::failure_response(*first) : empty_response(204));
        });
}

// Fork: cellgate's fork (a snapshot of the files + `count` children, all
// or none), each child a new E2B sandbox with the source's template,
// metadata and envVars and the request's timeout. The fork's snapshot is
// deleted once the children run (E2B lists none for a fork). 201
// [{"sandbox": Sandbox}, ...]; past a quota, 429 and nothing made.
void fork(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);
    const auto body = req->json_body();
    if (!body.is_object() && !body.is_null()) throw api_exception(400, "The body must be a JSON object");
    const auto count = body.is_object() ? kit::fork_count(body) : std::size_t{1};
    const auto timeout = timeout_of(body, e.agents.limits()).value_or(e.options.default_timeout);
    e.services.kernels.fork(
        k, count, "",
        [&e, reply, source = r, timeout](std::optional<kernels::failure> f, kernels::snapshot_record snap,
                                         std::vector<kernels::kernel_ptr> children) {
            if (f) return reply(kit::failure_response(*f));
            json out = json::array();
            for (const auto& c : children) {
                const auto rec = admit_sandbox(e, c, source.template_id, timeout, source.metadata, source.env_vars);
                out.push_back({{"sandbox", sandbox_json(e, rec)}});
            }
            spdlog::info("e2b: sandbox {} forked into {} (tenant {})", source.id, children.size(), source.tenant);
            e.services.kernels.delete_snapshot(snap.tenant, snap.id, [reply, out](std::optional<kernels::failure> gone) {
                if (gone) spdlog::warn("e2b: a fork's snapshot was not deleted: {}", gone->message);
                reply(json_response(201, out));
            });
        });
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
        // Connecting never shortens a sandbox's life, nor takes it past the
        // maximum from its start; resuming starts its clock again.
        if (paused) {
            r.started = sys_clock::now();
            r.end_at = r.started + *t;
        } else {
            r.end_at = std::min(std::max(r.end_at, sys_clock::now() + *t), latest_end(e, r));
        }
        core::sessions::end_at(k, r.end_at);
        e.book.put(r);
    }
    if (!paused) return reply(json_response(200, sandbox_json(e, r)));
    e.services.kernels.resume(k, [&e, r, reply](std::optional<kernels::failure> f) {
        reply(f ? kit::failure_response(*f) : json_response(201, sandbox_json(e, r)));
    });
}

void pause(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);
    if (k->state() == kernels::kernel_state::paused)
        throw api_exception(409, "Sandbox '" + r.id + "' is already paused");
    e.services.kernels.pause(k, [reply](std::optional<kernels::failure> f) {
        reply(f ? kit::failure_response(*f) : empty_response(204));
    });
}

void set_timeout(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);
    const auto body = req->json_body(false);
    const auto t = body.is_object() ? timeout_of(body, e.agents.limits()) : std::nullopt;
    if (!t) throw api_exception(400, "'timeout' (seconds) is required");
    // From now, as E2B: may shorten it too; never past the maximum from its start.
    r.end_at = std::min(sys_clock::now() + *t, latest_end(e, r));
    core::sessions::end_at(k, r.end_at);
    e.book.put(r);
    reply(empty_response(204));
}

void kill(surface& e, const request_ptr& req, reply_fn reply) {
    auto [r, k] = owned(e, req);  // the JS SDK reads a 404's body: {"code": 404}
    e.services.sessions.remove_for_kernel(k->id());
    e.services.kernels.shutdown(k, [reply](std::optional<kernels::failure> f) {
        reply(f ? kit::failure_response(*f) : empty_response(204));
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
    const auto render = [&](const sandbox_record& r) -> std::optional<json> {
        if (!matches(r, filter)) return std::nullopt;
        const auto k = e.services.kernels.find(req->who.tenant, r.id);
        if (!k || !(k->state() == kernels::kernel_state::paused ? want_paused : want_running)) return std::nullopt;
        return detail_json(e, r, *k, false);
    };
    if (!e.services.cluster_peers) return reply(page_of(e, *req, records, paged, render));
    if (node_part_only(*req)) return reply(page_of(e, *req, records, false, render));
    json local = json::array();
    for (const auto& r : records)
        if (auto j = render(r)) local.push_back(std::move(*j));
    reply_cluster_page(e, req, std::move(reply), std::move(local), paged, "startedAt", "sandboxID");
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
    add(bhttp::verb::post, "/sandboxes/{id}/snapshots",
        [&e](const request_ptr& req, reply_fn reply) { create_snapshot(e, req, std::move(reply)); });
    add(bhttp::verb::post, "/sandboxes/{id}/fork", [&e](const request_ptr& req, reply_fn reply) { fork(e, req, std::move(reply)); });
    add(bhttp::verb::get, "/snapshots", [&e](const request_ptr& req, reply_fn reply) { list_snapshots(e, req, std::move(reply)); });
    add(bhttp::verb::delete_, "/templates/{id}",
        [&e](const request_ptr& req, reply_fn reply) { delete_template(e, req, std::move(reply)); });
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
        if (auto k = e.services.kernels.find(rec.tenant, rec.id)) core::sessions::end_at(k, rec.end_at);
        else e.book.forget(rec.id);
    }
}

}  // namespace cellgate::e2b
