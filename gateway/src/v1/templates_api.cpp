// /v1/templates: each tenant's environments (templates/template_store.hpp).
// POST builds one (202 and a build id), GET lists and shows them, DELETE
// removes one; a build's status and log at …/builds/{id}, also as
// Server-Sent Events. Sessions start from one with POST /v1/sessions
// {"template": "name:tag"}. The archives COPY steps unpack are uploaded
// first, each under a key: PUT /v1/templates/files/{key} (a tar, gzip or
// not), GET to see whether it is there. See docs/templates.md.
#include "kit/template_uploads.hpp"
#include "templates/dockerfile.hpp"
#include "templates/template_store.hpp"
#include "v1/v1_api.hpp"
#include "util/api_error.hpp"

#include "util/encoding.hpp"
#include "util/multipart.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>

namespace cellgate::v1 {

using namespace kit;
using namespace http;
using nlohmann::json;

namespace {

templates::template_store& store_of(services& s) {
    if (!s.templates) throw api_exception(404, "This gateway builds no templates");
    return *s.templates;
}

// "{name}" in a path: "name" or "name:tag", with ?tag= as another way to say the tag.
std::pair<std::string, std::optional<std::string>> reference_of(const request_ptr& req) {
    const auto& raw = req->param("name");
    auto ref = templates::parse_reference(raw);
    if (!ref) throw api_exception(404, "No template '" + raw.substr(0, 64) + "'");
    std::optional<std::string> tag;
    if (raw.find(':') != std::string::npos) tag = ref->second;
    if (auto q = req->query_value("tag")) tag = *q;
    return {ref->first, tag};
}

// A POST /v1/templates body as its definition and its other tags ("tags": the build names each as well).
struct template_request {
    templates::definition d;
    std::vector<std::string> also_tags;
};

template_request definition_of(services& s, json body) {
    template_request out;
    if (body.is_object() && body.contains("tags")) {
        out.also_tags = templates::parse_tags(body["tags"]);
        body.erase("tags");
    }
    out.d = templates::parse_definition(templates::expand_dockerfile(body), store_of(s).settings());
    return out;
}

void start_build(templates::template_store& store, const request_ptr& req, const template_request& r,
                 const reply_fn& rep) {
    const auto& d = r.d;
    const auto id = store.build(req->who.tenant, d, r.also_tags);
    const auto at = "/v1/templates/" + d.name + ":" + d.tag + "/builds/" + id;
    json tags = json::array({d.tag});
    for (const auto& t : r.also_tags)
        if (t != d.tag) tags.push_back(t);
    auto res = json_response(202, {{"build_id", id},
                                   {"template", d.name + ":" + d.tag},
                                   {"tags", tags},
                                   {"kernelspec", templates::kernelspec_name(req->who.tenant, d.name, d.tag)},
                                   {"status", "queued"},
                                   {"status_url", at}});
    res.headers.emplace_back("Location", at);
    rep(std::move(res));
}

// A POST /v1/templates form as the JSON body it stands for, its files kept.
json template_form(templates::template_store& store, const request_ptr& req, int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size == 0) throw api_exception(400, "The form is empty");
    const auto size = static_cast<std::size_t>(st.st_size);
    const auto ct = req->req[bhttp::field::content_type];
    const auto boundary = multipart_boundary(std::string_view(ct.data(), ct.size()));
    if (!boundary) throw api_exception(400, "A multipart/form-data body needs a boundary in its Content-Type");
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) throw api_exception(500, "cannot map the upload");
    struct unmapper {
        void* p;
        std::size_t n;
        ~unmapper() { ::munmap(p, n); }
    } unmap{map, size};
    const std::string_view all(static_cast<const char*>(map), size);
    const auto parts = parse_multipart(all, *boundary, 8);
    if (!parts) throw api_exception(400, "The multipart body is malformed");
    json body = json::object();
    std::optional<std::string_view> dockerfile, files;
    for (const auto& p : *parts) {
        if (p.name == "template") {
            if (p.data.size() > (256u << 10)) throw api_exception(400, "The 'template' part is larger than 256 KiB");
            body = json::parse(p.data, nullptr, false);
            if (!body.is_object()) throw api_exception(400, "The 'template' part must be a JSON object");
        } else if (p.name == "dockerfile") {
            dockerfile = p.data;
        } else if (p.name == "files") {
            files = p.data;
        } else {
            throw api_exception(400, "A template's form has 'dockerfile', 'files' and 'template' parts, not '" +
                                         p.name.substr(0, 64) + "'");
        }
    }
    if (!dockerfile) throw api_exception(400, "The form has no 'dockerfile' part");
    body["dockerfile"] = std::string(*dockerfile);
    if (files) {
        // Kept under its own digest: the same archive sent again is the same key (and the same layers).
        const auto key = "form-" + sha256_hex(*files).substr(0, 48);
        store.files().put(req->who.tenant, key, *files, store.files_room(req->who.tenant));
        body["files"] = key;
    }
    return body;
}

}  // namespace

void register_templates_api(router& r, services& s) {
    auto files_model = [](const std::string& key, const templates::file_archive& a) {
        return json{{"key", key}, {"bytes", a.bytes}, {"sha256", a.digest}};
    };
    r.add_upload(bhttp::verb::put, "/v1/templates/files/{key}",
                 template_files_upload(
                     s, [](const request_ptr& req) { return req->param("key"); },
                     [files_model](const request_ptr& req, const templates::file_archive& a, const reply_fn& rep) {
                         rep(json_response(201, files_model(req->param("key"), a)));
                     }));
    r.add(bhttp::verb::get, "/v1/templates/files/{key}", [&s, files_model](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(s);
        run_file_work(s, req, std::move(reply), [&store, req, files_model](const reply_fn& rep) {
            const auto& key = req->param("key");
            const auto a = store.files().find(req->who.tenant, key);
            if (!a) throw api_exception(404, "No files uploaded as '" + key.substr(0, 128) + "'");
            rep(json_response(200, files_model(key, *a)));
        });
    });
    r.add(bhttp::verb::post, "/v1/templates", [&s](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(s);
        const auto wanted = definition_of(s, req->json_body(false));
        run_file_work(s, req, std::move(reply),
                      [&store, req, wanted](const reply_fn& rep) { start_build(store, req, wanted, rep); });
    });
    // The same as a form: a "dockerfile" part, a "files" part (its tar
    // archive, gzip or not: kept on the tenant's shelf first) and an
    // optional "template" part (the JSON body's other fields).
    r.add_upload(
        bhttp::verb::post, "/v1/templates",
        upload_handler{[&s](const request_ptr& req) {
                           auto& store = store_of(s);
                           auto room = store.files_room(req->who.tenant);
                           if (s.staging) room = std::min(room, s.staging->per_tenant() / 4);
                           return staged_upload(s, req, room + (2u << 20));
                       },
                       [&s](const request_ptr& req, std::uint64_t, reply_fn reply) {
                           auto form = kept_upload(req);
                           run_file_work(s, req, std::move(reply), [&s, req, form](const reply_fn& rep) {
                               auto& store = store_of(s);
                               const auto body = template_form(store, req, form->get());
                               start_build(store, req, definition_of(s, body), rep);
                           });
                       },
                       {"multipart/form-data"}});
    r.add(bhttp::verb::get, "/v1/templates", [&s](const request_ptr& req, reply_fn reply) {
        reply(json_response(200, {{"templates", store_of(s).list(req->who.tenant)}}));
    });
    r.add(bhttp::verb::get, "/v1/templates/{name}", [&s](const request_ptr& req, reply_fn reply) {
        const auto [name, tag] = reference_of(req);
        const auto m = store_of(s).get(req->who.tenant, name, tag);
        if (!m) throw api_exception(404, "No template '" + name + ":" + tag.value_or("latest") + "'");
        reply(json_response(200, *m));
    });
    r.add(bhttp::verb::delete_, "/v1/templates/{name}", [&s](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(s);
        const auto [name, tag] = reference_of(req);
        run_file_work(s, req, std::move(reply), [&store, req, name, tag](const reply_fn& rep) {
            store.remove(req->who.tenant, name, tag);
            rep(empty_response(204));
        });
    });
    // Tags: more names for what name:tag is (the same build), and a template's tags.
    r.add(bhttp::verb::post, "/v1/templates/{name}/tags", [&s](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(s);
        const auto [name, tag] = reference_of(req);
        const auto body = req->json_body();
        if (!body.is_object() || !body.contains("tags")) throw api_exception(400, "The body is {\"tags\": [\"tag\", …]}");
        const auto tags = templates::parse_tags(body["tags"]);
        run_file_work(s, req, std::move(reply), [&store, req, name, tag, tags](const reply_fn& rep) {
            rep(json_response(201, store.tag(req->who.tenant, name, tag.value_or("latest"), tags)));
        });
    });
    r.add(bhttp::verb::get, "/v1/templates/{name}/tags", [&s](const request_ptr& req, reply_fn reply) {
        const auto name = reference_of(req).first;
        auto tags = store_of(s).tags(req->who.tenant, name);
        if (tags.empty()) throw api_exception(404, "No template '" + name + "'");
        reply(json_response(200, {{"tags", std::move(tags)}}));
    });
    r.add(bhttp::verb::get, "/v1/templates/{name}/builds/{build_id}", [&s](const request_ptr& req, reply_fn reply) {
        auto& store = store_of(s);
        const auto after = query_number(req, "logs_after", 0, UINT64_MAX);
        const auto& id = req->param("build_id");
        if (!wants_event_stream(req)) {
            const auto m = store.build_model(req->who.tenant, id, after);
            if (!m) throw api_exception(404, "No build '" + id.substr(0, 64) + "'");
            return reply(json_response(200, *m));
        }
        if (!store.build_model(req->who.tenant, id, UINT64_MAX)) throw api_exception(404, "No build '" + id.substr(0, 64) + "'");
        response res;
        res.content_type = "text/event-stream";
        res.headers.emplace_back("X-Accel-Buffering", "no");
        res.stream = [&store, tenant = req->who.tenant, id, after](std::shared_ptr<stream_sink> sink) {
            auto gone = std::make_shared<std::atomic<bool>>(false);
            sink->on_disconnect([gone] { *gone = true; });
            bool found = false;
            try {
                found = store.watch(tenant, id, after, [sink, gone](const json& event) {
                if (*gone) return false;
                if (event.contains("log")) {
                    sink->write(sse_event("log", event));
                    return true;
                }
                sink->write(sse_event("end", event));
                sink->close();
                return false;
                });
            } catch (const api_exception& e) {
                sink->write(sse_event("end", {{"status", "refused"}, {"message", e.what()}}));
                sink->close();
                return;
            }
            if (!found) {
                sink->write(sse_event("end", {{"status", "gone"}}));
                sink->close();
            }
        };
        reply(std::move(res));
    });
}

}  // namespace cellgate::v1
