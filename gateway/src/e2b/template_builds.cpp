// E2B's template wire (what an unmodified Template.build() sends), over the
// core's templates (templates/template_store.hpp): POST /v3/templates asks
// for a build, POST /v2/templates/{id}/builds/{build} starts it with the
// SDK's steps, GET …/status follows it with its logs; aliases, list and
// delete. A template's id is its name; Sandbox.create('name:tag') starts a
// session from it (control_plane.cpp). See docs/e2b.md, docs/templates.md.
#include "e2b/surface.hpp"

#include "kit/template_uploads.hpp"
#include "templates/template_store.hpp"
#include "util/api_error.hpp"
#include "util/cluster_secret.hpp"
#include "util/encoding.hpp"

#include <algorithm>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>

namespace cellgate::e2b {

using namespace http;
using nlohmann::json;

namespace {

constexpr std::size_t max_requests_per_tenant = 16;
constexpr std::int64_t upload_url_seconds = 3600;

std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A build the SDK asked for (POST /v3/templates) and, once it sent its
// steps, the core's build that runs it.
struct build_request {
    std::string tenant, name, tag, e2b_id, core_build;
    std::vector<std::string> also_tags;  // the build's other tags
    std::optional<std::uint64_t> cpu_count, memory_mb;
    std::int64_t created_ms = 0;
};

class build_requests {
public:
    build_request add(build_request r) {
        std::lock_guard lock(mutex_);
        r.e2b_id = random_id();
        auto& mine = by_tenant_[r.tenant];
        mine.push_back(r.e2b_id);
        while (mine.size() > max_requests_per_tenant) {
            requests_.erase(mine.front());
            mine.pop_front();
        }
        requests_[r.e2b_id] = r;
        return r;
    }
    std::optional<build_request> find(const std::string& tenant, const std::string& id) const {
        std::lock_guard lock(mutex_);
        const auto it = requests_.find(id);
        if (it == requests_.end() || it->second.tenant != tenant) return std::nullopt;
        return it->second;
    }
    void started(const std::string& id, const std::string& core_build) {
        std::lock_guard lock(mutex_);
        if (const auto it = requests_.find(id); it != requests_.end()) it->second.core_build = core_build;
    }

private:
    static std::string random_id() {
        static thread_local std::mt19937_64 rng{std::random_device{}()};
        std::ostringstream s;
        s << std::hex << rng() << rng();
        auto out = s.str();
        out.resize(32, '0');
        return out.substr(0, 8) + "-" + out.substr(8, 4) + "-" + out.substr(12, 4) + "-" + out.substr(16, 4) + "-" +
               out.substr(20, 12);
    }
    mutable std::mutex mutex_;
    std::map<std::string, build_request> requests_;
    std::map<std::string, std::deque<std::string>> by_tenant_;
};

std::string random_key() {
    std::random_device rd;
    std::string key(32, '\0');
    for (auto& c : key) c = static_cast<char>(rd());
    return key;
}

templates::template_store& store_of(surface& e) {
    if (!e.services.templates) throw api_exception(404, "This gateway builds no templates");
    return *e.services.templates;
}

// The SDK's base → the core's: its Python images and E2B's own bases are the
// Python data image; another template of the tenant's by name; nothing else
// without a registry.
json base_of(const json& body) {
    if (const auto it = body.find("fromImageRegistry"); it != body.end() && !it->is_null())
        throw api_exception(400, "fromImageRegistry: this gateway pulls no images from a registry; build from "
                                 "fromPythonImage(), fromBaseImage() or fromTemplate(…)");
    if (const auto it = body.find("fromTemplate"); it != body.end() && it->is_string()) {
        const auto t = it->get<std::string>();
        if (t == "base" || t == "code-interpreter-v1" || t == "code-interpreter") return {{"image", "python"}};
        return {{"template", t}};
    }
    std::string image = "e2bdev/base";
    if (const auto it = body.find("fromImage"); it != body.end() && it->is_string()) image = it->get<std::string>();
    const auto repo = image.substr(0, image.find(':'));
    if (repo == "python" || repo == "e2bdev/base" || repo.starts_with("e2bdev/code-interpreter") ||
        repo == "library/python" || repo == "docker.io/library/python")
        return {{"image", "python"}};
    for (const char* builtin : {"debian", "node"})  // fromDebianImage(), fromNodeImage()
        if (repo == builtin || repo == std::string("library/") + builtin || repo == std::string("docker.io/library/") + builtin)
            return {{"image", builtin}};
    // host[:port]/repository: a registry the operator may allow (the build says if it does not).
    if (const auto slash = image.find('/'); slash != std::string::npos &&
        image.substr(0, slash).find_first_of(".:") != std::string::npos && launcher::is_valid_image_reference(image))
        return {{"oci", image}};
    throw api_exception(400, "fromImage '" + image.substr(0, 100) +
                                 "': this gateway pulls only from the registries its operator names (give the "
                                 "image as host[:port]/repository:tag); its own bases are the Python data image "
                                 "(fromPythonImage(), fromBaseImage()), minimal Debian 12 (fromDebianImage()), Debian 12 with Node.js (fromNodeImage()) and your "
                                 "templates (fromTemplate(…))");
}

// POST /v2/templates/{id}/builds/{build}'s body as the core's definition.
json definition_of(const build_request& r, const json& body) {
    if (!body.is_object()) throw api_exception(400, "The body must be a JSON object");
    json d = {{"name", r.name}, {"tag", r.tag}, {"from", base_of(body)}, {"steps", json::array()}};
    if (const auto it = body.find("steps"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw api_exception(400, "'steps' must be an array");
        for (const auto& s : *it) {
            if (!s.is_object()) throw api_exception(400, "a step must be an object");
            json step = {{"type", s.value("type", "")}, {"args", s.value("args", json::array())}};
            if (s.contains("force") && s["force"].is_boolean()) step["force"] = s["force"];
            if (const auto h = s.find("filesHash"); h != s.end() && h->is_string()) step["files"] = *h;
            d["steps"].push_back(step);
        }
    }
    for (auto [from, to] : {std::pair{"startCmd", "start_cmd"}, std::pair{"readyCmd", "ready_cmd"}})
        if (const auto it = body.find(from); it != body.end() && !it->is_null()) d[to] = *it;
    if (const auto it = body.find("force"); it != body.end() && it->is_boolean()) d["force"] = *it;
    json resources = json::object();
    if (r.cpu_count) resources["cpu_millis"] = *r.cpu_count * 1000;
    if (r.memory_mb) resources["memory_bytes"] = *r.memory_mb << 20;
    if (!resources.empty()) d["resources"] = resources;
    return d;
}

std::string iso_ms(std::int64_t ms) {
    return kernels::iso8601(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

json template_json(const surface& e, const json& model) {
    const auto name = model.value("name", ""), tag = model.value("tag", "latest");
    const auto created = iso_ms(model.value("created_at_ms", std::int64_t{0}));
    const auto& res = model["definition"].value("resources", json::object());
    return {{"templateID", name},
            {"buildID", model.value("build_id", "")},
            {"cpuCount", std::max<std::uint64_t>(1, res.value("cpu_millis", std::uint64_t{1000}) / 1000)},
            {"memoryMB", res.value("memory_bytes", std::uint64_t{2} << 30) >> 20},
            {"diskSizeMB", res.value("workspace_bytes", std::uint64_t{1} << 30) >> 20},
            {"public", false},
            {"aliases", json::array({name})},
            {"names", json::array({name + ":" + tag})},
            {"createdAt", created},
            {"updatedAt", created},
            {"createdBy", nullptr},
            {"lastSpawnedAt", nullptr},
            {"spawnCount", 0},
            {"buildCount", 1},
            {"envdVersion", e.options.envd_version},
            {"buildStatus", "ready"}};
}

}  // namespace

void register_template_builds(router& r, surface& e) {
    auto requests = std::make_shared<build_requests>();
    auto add = [&r](bhttp::verb v, const std::string& pattern, handler_fn h) {
        r.add_guarded(v, "/e2b" + pattern, control_guard, rest_handler(std::move(h)));
    };
    // 1. A build is asked for: its name and tags, its resources.
    add(bhttp::verb::post, "/v3/templates", [&e, requests](const request_ptr& req, reply_fn reply) {
        store_of(e);
        const auto body = req->json_body();
        if (!body.is_object()) throw api_exception(400, "The body must be a JSON object");
        const auto raw = body.value("name", std::string());
        const auto ref = templates::parse_reference(raw);
        if (!ref) throw api_exception(400, "'name' is a template's name[:tag]: [a-z0-9][a-z0-9_-]{0,62}, a tag [A-Za-z0-9_.-]{1,64}");
        build_request b{.tenant = req->who.tenant, .name = ref->first, .tag = ref->second, .e2b_id = {}, .core_build = {},
                        .also_tags = {}, .cpu_count = {}, .memory_mb = {}, .created_ms = 0};
        if (const auto it = body.find("tags"); it != body.end() && it->is_array() && !it->empty()) {
            // The SDK's "additional tags": beside the name's own tag, else the first is the build's.
            const auto tags = templates::parse_tags(*it);
            const bool named = raw.find(':') != std::string::npos;
            if (!named) b.tag = tags[0];
            for (const auto& t : tags)
                if (t != b.tag) b.also_tags.push_back(t);
        }
        for (const char* k : {"cpuCount", "memoryMB"})
            if (const auto it = body.find(k); it != body.end() && !it->is_null()) {
                if (!it->is_number_unsigned() || it->get<std::uint64_t>() == 0 || it->get<std::uint64_t>() > (1u << 20))
                    throw api_exception(400, std::string("'") + k + "' must be a positive whole number");
                (std::string(k) == "cpuCount" ? b.cpu_count : b.memory_mb) = it->get<std::uint64_t>();
            }
        b.created_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
        const auto made = requests->add(b);
        json names = json::array({made.name + ":" + made.tag}), tags = json::array({made.tag});
        for (const auto& t : made.also_tags) {
            names.push_back(made.name + ":" + t);
            tags.push_back(t);
        }
        reply(json_response(202, {{"templateID", made.name},
                                  {"buildID", made.e2b_id},
                                  {"public", false},
                                  {"names", names},
                                  {"tags", tags},
                                  {"aliases", json::array({made.name})}}));
    });
    // 2. The files a COPY step unpacks: whether the tenant has them, else a
    // URL to PUT them to (signed for this tenant and hash, an hour; the SDK
    // sends no key with it, as to a bucket's signed URL).
    auto signer = std::make_shared<util::cluster_secret>(random_key());
    add(bhttp::verb::get, "/templates/{id}/files/{hash}", [&e, signer](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(e);
        const auto& hash = req->param("hash");
        if (!templates::file_store::valid_key(hash)) throw api_exception(400, "A files hash is 8 to 128 of [A-Za-z0-9_-]");
        kit::run_file_work(e.services, req, std::move(reply), [&e, &store, signer, req, hash](const reply_fn& rep) {
            // 201 either way, as E2B's API answers it (its generated Python client reads no other status).
            if (store.files().find(req->who.tenant, hash)) return rep(json_response(201, {{"present", true}}));
            const auto expires = std::to_string(unix_now() + upload_url_seconds);
            const auto& tenant = req->who.tenant;
            const auto host = req->req[bhttp::field::host];
            const auto url = std::string(e.options.https ? "https://" : "http://") + std::string(host.data(), host.size()) +
                             "/e2b/templates/" + url_encode_path(req->param("id")) + "/files/" + hash +
                             "?tenant=" + url_encode_path(tenant) + "&expires=" + expires +
                             "&signature=" + signer->sign("e2b template files", {tenant, hash, expires});
            rep(json_response(201, {{"present", false}, {"url", url}}));
        });
    });
    auto upload_guard = [signer](request_context& ctx, const authenticator&) -> std::optional<response> {
        const auto tenant = ctx.query_value("tenant"), expires = ctx.query_value("expires"),
                   signature = ctx.query_value("signature");
        const auto& hash = ctx.param("hash");
        if (!tenant || !expires || !signature || !signer->verify(*signature, "e2b template files", {*tenant, hash, *expires}))
            return rest_error(403, "This upload URL is not one this gateway signed");
        if (expires->empty() || expires->size() > 12 ||
            !std::all_of(expires->begin(), expires->end(), [](char c) { return c >= '0' && c <= '9'; }) ||
            std::stoll(*expires) < unix_now())
            return rest_error(403, "This upload URL has expired: ask for the files' link again");
        ctx.who = identity{};
        ctx.who.tenant = *tenant;
        return std::nullopt;
    };
    r.add_guarded(bhttp::verb::put, "/e2b/templates/{id}/files/{hash}", upload_guard, [](const request_ptr&, reply_fn) {
        throw api_exception(400, "Send the archive as the request's body");
    });
    r.add_upload(bhttp::verb::put, "/e2b/templates/{id}/files/{hash}",
                 kit::template_files_upload(
                     e.services, [](const request_ptr& req) { return req->param("hash"); },
                     [](const request_ptr&, const templates::file_archive&, const reply_fn& rep) { rep(empty_response(200)); }));
    // 3. The steps: the build starts.
    add(bhttp::verb::post, "/v2/templates/{id}/builds/{build}", [&e, requests](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(e);
        const auto b = requests->find(req->who.tenant, req->param("build"));
        if (!b || b->name != req->param("id")) throw api_exception(404, "Build '" + req->param("build").substr(0, 64) + "' not found");
        if (!b->core_build.empty()) throw api_exception(409, "Build '" + b->e2b_id + "' has started already");
        const auto d = templates::parse_definition(definition_of(*b, req->json_body()), store.settings());
        kit::run_file_work(e.services, req, std::move(reply), [&store, requests, req, d, id = b->e2b_id,
                                                               also = b->also_tags](const reply_fn& rep) {
            requests->started(id, store.build(req->who.tenant, d, also));
            rep(empty_response(202));
        });
    });
    // 4. Its status and logs, from logsOffset on.
    add(bhttp::verb::get, "/templates/{id}/builds/{build}/status", [&e, requests](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(e);
        const auto b = requests->find(req->who.tenant, req->param("build"));
        if (!b || b->name != req->param("id")) throw api_exception(404, "Build '" + req->param("build").substr(0, 64) + "' not found");
        json out = {{"templateID", b->name}, {"buildID", b->e2b_id}, {"logs", json::array()}, {"logEntries", json::array()}};
        if (b->core_build.empty()) {
            out["status"] = "waiting";
            return reply(json_response(200, out));
        }
        const auto offset = kit::query_number(req, "logsOffset", 0, UINT64_MAX);
        const auto m = store.build_model(req->who.tenant, b->core_build, offset);
        if (!m) throw api_exception(404, "Build '" + b->e2b_id + "' not found");
        const auto status = (*m)["status"].get<std::string>();
        out["status"] = status == "ready" || status == "error" ? status : "building";
        const auto now = kernels::iso8601(std::chrono::system_clock::now());
        for (const auto& line : (*m)["logs"]) {
            out["logs"].push_back(line);
            out["logEntries"].push_back({{"timestamp", now}, {"level", "info"}, {"message", line}});
        }
        if (const auto f = m->find("failure"); f != m->end()) {
            json reason = {{"message", f->value("message", "the build failed")}, {"logEntries", json::array()}};
            if (f->contains("step")) reason["step"] = std::to_string((*f)["step"].value("index", 0) + 1);
            if (f->contains("log_tail")) reason["logEntries"].push_back({{"timestamp", now}, {"level", "error"}, {"message", (*f)["log_tail"]}});
            out["reason"] = reason;
        }
        reply(json_response(200, out));
    });
    // 5. Tags: another name for a build (as a Docker tag), removing some, listing a template's.
    add(bhttp::verb::post, "/templates/tags", [&e](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(e);
        const auto body = req->json_body();
        if (!body.is_object() || !body.contains("target") || !body["target"].is_string())
            throw api_exception(400, "The body is {\"target\": \"name:tag\", \"tags\": [...]}");
        const auto ref = templates::parse_reference(body["target"].get<std::string>());
        if (!ref) throw api_exception(400, "'target' is a template's name[:tag]");
        const auto tags = templates::parse_tags(body.value("tags", json()));
        kit::run_file_work(e.services, req, std::move(reply), [&store, req, ref, tags](const reply_fn& rep) {
            const auto out = store.tag(req->who.tenant, ref->first, ref->second, tags);
            rep(json_response(201, {{"buildID", out["build_id"]}, {"tags", out["tags"]}}));
        });
    });
    add(bhttp::verb::delete_, "/templates/tags", [&e](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(e);
        const auto body = req->json_body();
        if (!body.is_object() || !body.contains("name") || !body["name"].is_string())
            throw api_exception(400, "The body is {\"name\": \"name\", \"tags\": [...]}");
        const auto ref = templates::parse_reference(body["name"].get<std::string>());
        if (!ref) throw api_exception(400, "'name' is a template's name");
        const auto tags = templates::parse_tags(body.value("tags", json()));
        kit::run_file_work(e.services, req, std::move(reply), [&store, req, ref, tags](const reply_fn& rep) {
            const auto have = store.tags(req->who.tenant, ref->first);
            for (const auto& t : tags)
                if (std::none_of(have.begin(), have.end(), [&](const json& h) { return h["tag"] == t; }))
                    throw api_exception(404, "Template '" + ref->first + ":" + t + "' not found");
            for (const auto& t : tags) store.remove(req->who.tenant, ref->first, t);
            rep(empty_response(204));
        });
    });
    add(bhttp::verb::get, "/templates/{id}/tags", [&e](const request_ptr& req, reply_fn reply) {
        const auto ref = templates::parse_reference(req->param("id"));
        const auto tags = ref ? store_of(e).tags(req->who.tenant, ref->first) : json::array();
        if (tags.empty()) throw api_exception(404, "Template '" + req->param("id").substr(0, 100) + "' not found");
        json out = json::array();
        for (const auto& t : tags)
            out.push_back({{"tag", t["tag"]}, {"buildID", t["build_id"]}, {"createdAt", iso_ms(t["created_at_ms"].get<std::int64_t>())}});
        reply(json_response(200, out));
    });
    // 6. Management: whether a name exists, the list, one.
    add(bhttp::verb::get, "/templates/aliases/{alias}", [&e](const request_ptr& req, reply_fn reply) {
        const auto ref = templates::parse_reference(req->param("alias"));
        if (!ref || !store_of(e).get(req->who.tenant, ref->first, std::nullopt))
            throw api_exception(404, "Template '" + req->param("alias").substr(0, 100) + "' not found");
        reply(json_response(200, {{"templateID", ref->first}, {"public", false}}));
    });
    auto list = [&e](const request_ptr& req, reply_fn reply) {
        json out = json::array();
        for (const auto& m : store_of(e).list(req->who.tenant)) out.push_back(template_json(e, m));
        reply(json_response(200, out));
    };
    add(bhttp::verb::get, "/templates", list);
    add(bhttp::verb::get, "/v2/templates", list);
    add(bhttp::verb::get, "/templates/{id}", [&e](const request_ptr& req, reply_fn reply) {
        const auto ref = templates::parse_reference(req->param("id"));
        const auto m = ref ? store_of(e).get(req->who.tenant, ref->first, std::nullopt) : std::nullopt;
        if (!m || m->value("status", "") != "ready") throw api_exception(404, "Template '" + req->param("id").substr(0, 100) + "' not found");
        auto t = template_json(e, *m);
        t["builds"] = json::array({{{"buildID", m->value("build_id", "")}, {"status", "ready"},
                                    {"createdAt", t["createdAt"]}, {"updatedAt", t["updatedAt"]},
                                    {"cpuCount", t["cpuCount"]}, {"memoryMB", t["memoryMB"]}}});
        reply(json_response(200, t));
    });
}

}  // namespace cellgate::e2b
