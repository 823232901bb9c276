// envd's port (49983): health, /files (download, multipart or raw upload)
// and the filesystem service over Connect, on the sandbox's workspace.
#include "e2b/connect_rpc.hpp"
#include "e2b/surface.hpp"

#include "util/api_error.hpp"
#include "util/multipart.hpp"

#include <spdlog/spdlog.h>

#include <deque>

namespace cellgate::e2b {

using namespace http;
using nlohmann::json;
using contents::contents_error;
using contents::contents_store;
using contents::entry_info;
using contents::entry_type;

namespace {

constexpr unsigned max_list_depth = 32;

// Runs `work` on the file-I/O pool with the workspace's errors mapped.
void on_pool(surface& e, const request_ptr& req, reply_fn reply, std::function<void(const reply_fn&)> work) {
    kit::run_file_work(e.services, req, std::move(reply), [work = std::move(work)](const reply_fn& rep) {
        try {
            work(rep);
        } catch (const contents_error& err) {
            rethrow_contents(err);
        }
    });
}

json entry_json(const entry_info& i) {
    const bool dir = i.type == entry_type::directory;
    const auto mtime = sys_clock::time_point(
        std::chrono::duration_cast<sys_clock::duration>(std::chrono::nanoseconds(i.mtime_ns)));
    return {{"name", i.name.empty() ? std::string("user") : i.name},
            {"type", dir ? "FILE_TYPE_DIRECTORY" : "FILE_TYPE_FILE"},
            {"path", e2b_path(i.path)},
            {"size", std::to_string(i.size)},
            {"mode", dir ? 0755 : 0644},
            {"permissions", dir ? "drwxr-xr-x" : (i.writable ? "-rw-r--r--" : "-r--r--r--")},
            {"owner", "user"},
            {"group", "user"},
            {"modifiedTime", kernels::iso8601(mtime)}};
}

std::string string_member(const json& body, const char* key, bool required = true) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) {
        if (required) throw api_exception(400, std::string("'") + key + "' is required");
        return {};
    }
    if (!it->is_string()) throw api_exception(400, std::string("'") + key + "' must be a string");
    return it->get<std::string>();
}

// ListDir: `depth` levels below the directory (1: its entries), breadth
// first, at most the gateway's listing budget in all.
json list_dir(const contents_store& store, const std::string& dir, unsigned depth, std::size_t budget) {
    json entries = json::array();
    std::deque<std::pair<std::string, unsigned>> todo{{dir, 1}};
    while (!todo.empty() && entries.size() < budget) {
        auto [d, level] = todo.front();
        todo.pop_front();
        const auto listed = store.list(d, budget - entries.size());
        for (const auto& i : listed.entries) {
            entries.push_back(entry_json(i));
            if (i.type == entry_type::directory && level < depth) todo.emplace_back(i.path, level + 1);
        }
    }
    return {{"entries", std::move(entries)}};
}

// A directory watch: set up on the file pool (a recursive one walks the
// tree), then streamed (WatchDir: a start message, each event, keepalives,
// and the end-of-stream frame when the directory goes or the client leaves)
// or kept for polling (CreateWatcher → its id).
void watch(surface& e, const request_ptr& req, const json& m, reply_fn reply, bool stream) {
    const auto k = sandbox_kernel(e, req);
    const auto dir = workspace_path(string_member(m, "path", false));
    const auto it = m.find("recursive");
    if (it != m.end() && !it->is_null() && !it->is_boolean()) throw api_exception(400, "'recursive' must be a boolean");
    const bool recursive = it != m.end() && it->is_boolean() && it->get<bool>();
    unsigned status = 0;
    std::string why;
    if (!e.watches->admit(k->id(), k->tenant(), status, why)) throw api_exception(status, why);
    // Given back unless the watch is set up (then the book's entry holds it).
    struct admission {
        admission(watch_book& b, std::string id) : book(b), kernel_id(std::move(id)) {}
        admission(const admission&) = delete;
        admission& operator=(const admission&) = delete;
        ~admission() {
            if (held) book.cancel_admission(kernel_id);
        }
        watch_book& book;
        std::string kernel_id;
        bool held = true;
    };
    auto admitted = std::make_shared<admission>(*e.watches, k->id());
    on_pool(e, req, std::move(reply), [&e, k, dir, recursive, stream, admitted](const reply_fn& rep) mutable {
        std::shared_ptr<contents_store> store = sandbox_store(k);
        // Later walks (directories created or moved in) go to the pool too, under the tenant.
        auto walk = [&e, tenant = k->tenant()](std::function<void()> job) {
            if (e.services.file_io == nullptr) {
                job();
                return true;
            }
            return e.services.file_io->submit(tenant, std::move(job)) == util::file_io_pool::admission::accepted;
        };
        auto w = std::make_shared<dir_watch>(e.agents.io(), std::move(store), dir, recursive, e.watches->limits(),
                                             std::move(walk));
        w->set_owner(k->id());
        e.watches->add(w);
        admitted->held = false;
        k->touch();
        if (!stream) {
            w->start(nullptr, [](const std::string&) {});
            return rep(json_response(200, {{"watcherId", w->id()}}));
        }
        rep(connect::stream_response([&e, w](std::shared_ptr<stream_sink> sink) {
            sink->write(connect::envelope({{"start", json::object()}}));
            auto stop_keepalive = util::every(e.agents.io(), std::chrono::seconds(20), [sink] {
                sink->write(connect::envelope({{"keepalive", json::object()}}));
            });
            w->start(
                [sink](const std::vector<json>& events) {
                    for (const auto& ev : events) sink->write(connect::envelope({{"filesystem", ev}}));
                },
                [&e, sink, w_id = w->id(), kernel_id = w->kernel_id(), stop_keepalive](const std::string& ended) {
                    stop_keepalive();
                    e.watches->release(kernel_id, w_id);
                    sink->write(ended == "stopped" ? connect::end_stream()
                                                   : connect::end_stream(std::pair{std::string_view("not_found"), ended}));
                    sink->close();
                });
            sink->on_disconnect([w] { w->stop(); });
        }));
    });
}

void register_filesystem(router& r, surface& e) {
    auto rpc = [&r, &e](const std::string& method, std::function<json(const json&, contents_store&)> call) {
        r.add_guarded(bhttp::verb::post, "/e2b/filesystem.Filesystem/" + method, sandbox_guard(e, envd_port, true),
                      connect_handler([&e, call = std::move(call)](const request_ptr& req, reply_fn reply) {
                          const auto k = sandbox_kernel(e, req);
                          const auto body = req->json_body();
                          on_pool(e, req, std::move(reply), [k, body, call](const reply_fn& rep) {
                              const auto store = sandbox_store(k);
                              k->touch();
                              rep(json_response(200, call(body.is_object() ? body : json::object(), *store)));
                          });
                      }));
    };
    const auto budget = e.services.max_listed_entries;
    rpc("ListDir", [budget](const json& b, contents_store& store) {
        unsigned depth = 1;
        if (const auto it = b.find("depth"); it != b.end() && !it->is_null()) {
            if (!it->is_number_unsigned() && !it->is_number_integer()) throw api_exception(400, "'depth' must be a number");
            depth = static_cast<unsigned>(std::clamp<long long>(it->get<long long>(), 1, max_list_depth));
        }
        const auto dir = workspace_path(string_member(b, "path", false));
        if (store.stat(dir).type != entry_type::directory) throw api_exception(400, "Not a directory: " + e2b_path(dir));
        return list_dir(store, dir, depth, budget);
    });
    rpc("Stat", [](const json& b, contents_store& store) {
        return json{{"entry", entry_json(store.stat(workspace_path(string_member(b, "path"))))}};
    });
    rpc("MakeDir", [](const json& b, contents_store& store) {
        const auto path = workspace_path(string_member(b, "path"));
        if (path.empty() || store.exists(path)) throw api_exception(409, "Already exists: " + e2b_path(path));
        store.make_parents(path);  // as mkdir -p, like envd
        return json{{"entry", entry_json(store.make_dir(path))}};
    });
    rpc("Move", [](const json& b, contents_store& store) {
        const auto from = workspace_path(string_member(b, "source"));
        const auto to = workspace_path(string_member(b, "destination"));
        if (from.empty() || to.empty()) throw api_exception(400, "The home directory itself cannot be moved");
        store.make_parents(to);
        return json{{"entry", entry_json(store.rename(from, to, true))}};
    });
    rpc("Remove", [](const json& b, contents_store& store) {
        const auto path = workspace_path(string_member(b, "path"));
        if (path.empty()) throw api_exception(400, "The home directory itself cannot be removed");
        store.remove(path, true);
        return json::object();
    });
    // WatchDir: a server stream; CreateWatcher / GetWatcherEvents /
    // RemoveWatcher: the same watch, polled (the Python SDK's sync client).
    r.add_guarded(bhttp::verb::post, "/e2b/filesystem.Filesystem/WatchDir", sandbox_guard(e, envd_port, true),
                  connect_handler([&e](const request_ptr& req, reply_fn reply) {
                      watch(e, req, connect::request_message(req->req.body()), std::move(reply), true);
                  }));
    r.add_guarded(bhttp::verb::post, "/e2b/filesystem.Filesystem/CreateWatcher", sandbox_guard(e, envd_port, true),
                  connect_handler([&e](const request_ptr& req, reply_fn reply) {
                      const auto body = req->json_body();
                      watch(e, req, body.is_object() ? body : json::object(), std::move(reply), false);
                  }));
    auto watcher = [&e](const request_ptr& req) {
        const auto k = sandbox_kernel(e, req);
        const auto body = req->json_body();
        const auto id = string_member(body.is_object() ? body : json::object(), "watcherId");
        auto w = e.watches->find(k->id(), id);
        if (!w) throw api_exception(404, "No watcher '" + id.substr(0, 64) + "'");
        return w;
    };
    r.add_guarded(bhttp::verb::post, "/e2b/filesystem.Filesystem/GetWatcherEvents", sandbox_guard(e, envd_port, true),
                  connect_handler([watcher](const request_ptr& req, reply_fn reply) {
                      reply(json_response(200, {{"events", watcher(req)->take()}}));
                  }));
    r.add_guarded(bhttp::verb::post, "/e2b/filesystem.Filesystem/RemoveWatcher", sandbox_guard(e, envd_port, true),
                  connect_handler([&e, watcher](const request_ptr& req, reply_fn reply) {
                      const auto w = watcher(req);
                      e.watches->release(w->kernel_id(), w->id());
                      w->stop();
                      reply(json_response(200, json::object()));
                  }));
}

// GET /files?path=: the file's bytes.
void download(surface& e, const request_ptr& req, reply_fn reply) {
    const auto k = sandbox_kernel(e, req);
    const auto q = req->query_value("path");
    if (!q) throw api_exception(400, "'path' is required");
    const auto path = workspace_path(*q);
    on_pool(e, req, std::move(reply), [k, path](const reply_fn& rep) {
        const auto store = sandbox_store(k);
        k->touch();
        if (store->stat(path).type == entry_type::directory) throw api_exception(400, "A directory: " + e2b_path(path));
        std::uint64_t size = 0;
        response res;
        res.file_fd = store->open_for_read(path, size);
        res.file_size = size;
        res.content_type = "application/octet-stream";
        rep(std::move(res));
    });
}

json written(const entry_info& i) {
    return {{"path", e2b_path(i.path)}, {"name", i.name}, {"type", "file"}};
}

// POST /files: a multipart form (part "file", the path in its filename or
// the query), or one raw body for ?path=.
void upload(surface& e, const request_ptr& req, reply_fn reply) {
    const auto k = sandbox_kernel(e, req);
    const auto ct = req->req[bhttp::field::content_type];
    const std::string_view type(ct.data(), ct.size());
    const auto query_path = req->query_value("path");
    const auto limit = k->policy().upload_limit_bytes;
    if (!req->req[bhttp::field::content_encoding].empty())
        throw api_exception(415, "Compressed uploads are not accepted; send the bytes as they are");
    on_pool(e, req, std::move(reply), [k, req, type = std::string(type), query_path, limit](const reply_fn& rep) {
        const auto store = sandbox_store(k);
        k->touch();
        json out = json::array();
        auto save = [&](const std::string& e2b_name, std::string_view data) {
            if (data.size() > limit) throw api_exception(413, "A file is larger than the upload limit (" + std::to_string(limit) + " bytes)");
            const auto path = workspace_path(e2b_name);
            if (path.empty()) throw api_exception(400, "A file needs a name");
            store->make_parents(path);
            out.push_back(written(store->write(path, data)));
        };
        if (const auto boundary = multipart_boundary(type)) {
            const auto parts = parse_multipart(req->req.body(), *boundary);
            if (!parts) throw api_exception(400, "The multipart body is malformed");
            std::size_t files = 0;
            for (const auto& p : *parts) files += p.filename ? 1u : 0u;
            for (const auto& p : *parts) {
                if (!p.filename) continue;
                save(query_path && files == 1 ? *query_path : *p.filename, p.data);
            }
        } else {
            if (!query_path) throw api_exception(400, "'path' is required for a raw upload");
            save(*query_path, req->req.body());
        }
        if (out.empty()) throw api_exception(400, "No file in the request");
        rep(json_response(200, out));
    });
}

}  // namespace

void register_envd(router& r, surface& e) {
    r.add_guarded(bhttp::verb::get, "/e2b/health", sandbox_guard(e, 0, false),
                  rest_handler([&e](const request_ptr& req, reply_fn reply) {
                      const auto k = sandbox_kernel(e, req);
                      const bool up = k->state() != kernels::kernel_state::dead;
                      if (req->param("port") == std::to_string(interpreter_port)) {
                          response res;
                          res.status = up ? 200 : 502;
                          res.content_type = "application/json";
                          res.body = up ? "\"OK\"" : "\"kernel dead\"";
                          return reply(std::move(res));
                      }
                      reply(up ? empty_response(204) : rest_error(502, "The sandbox's kernel is dead"));
                  }));
    r.add_guarded(bhttp::verb::get, "/e2b/files", sandbox_guard(e, envd_port, false),
                  rest_handler([&e](const request_ptr& req, reply_fn reply) { download(e, req, std::move(reply)); }));
    r.add_guarded(bhttp::verb::post, "/e2b/files", sandbox_guard(e, envd_port, false),
                  rest_handler([&e](const request_ptr& req, reply_fn reply) { upload(e, req, std::move(reply)); }));
    register_filesystem(r, e);
}

}  // namespace cellgate::e2b
