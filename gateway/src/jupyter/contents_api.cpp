// /api/contents and /files over the workspaces. The contents root lists the
// caller's kernels as directories named by kernel id; inside one is that
// kernel's /workspace. Every file operation goes through contents_store, which
// never follows a link out of the workspace.
#include "jupyter/jupyter_api.hpp"
#include "contents/checkpoints.hpp"
#include "contents/contents_store.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

namespace cellgate::jupyter {

using namespace kit;

using namespace http;
using contents::contents_error;
using contents::contents_store;
using contents::entry_info;
using contents::entry_type;
using contents::error_kind;
namespace fs = std::filesystem;

namespace {

std::string iso_from_ns(std::int64_t ns) {
    return kernels::iso8601(std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(ns))));
}

// "<kernel_id>/<rest>" split into the kernel and the path inside its workspace.
struct located {
    kernels::kernel_ptr kernel;
    std::string rel;  // "" for the workspace root
    std::unique_ptr<contents_store> store;
    std::string prefix() const { return kernel->id(); }
    std::string full(const std::string& r) const { return r.empty() ? prefix() : prefix() + "/" + r; }
};

located locate(services& s, const request_ptr& req, const std::string& path) {
    std::string p = path;
    while (!p.empty() && p.back() == '/') p.pop_back();
    while (!p.empty() && p.front() == '/') p.erase(0, 1);
    const auto slash = p.find('/');
    located l;
    l.kernel = kernel_or_404(s, req, p.substr(0, slash));
    l.rel = slash == std::string::npos ? "" : p.substr(slash + 1);
    const auto sb = l.kernel->sandbox();
    if (!sb) throw api_exception(409, "The kernel's workspace is not ready");
    try {
        l.rel = contents_store::check_path(l.rel);
        l.store = std::make_unique<contents_store>(sb->workspace_dir, sb->host_uid_base + sb->spec.uid,
                                                  sb->host_uid_base + sb->spec.gid);
    } catch (const contents_error& e) {
        throw api_exception(contents_status(e.kind()), e.what());
    }
    return l;
}

bool is_notebook_name(const std::string& name) { return name.size() > 6 && name.ends_with(".ipynb"); }

nlohmann::json base_model(const located& l, const entry_info& e, const std::string& type) {
    return {{"name", e.path.empty() ? l.kernel->id() : e.name},
            {"path", l.full(e.path)},
            {"type", type},
            {"created", iso_from_ns(e.ctime_ns)},
            {"last_modified", iso_from_ns(e.mtime_ns)},
            {"content", nullptr},
            {"format", nullptr},
            {"mimetype", nullptr},
            {"size", e.type == entry_type::file ? nlohmann::json(e.size) : nlohmann::json(nullptr)},
            {"writable", e.writable},
            {"hash", nullptr},
            {"hash_algorithm", nullptr}};
}

std::string type_of(const entry_info& e) {
    if (e.type == entry_type::directory) return "directory";
    return is_notebook_name(e.name) ? "notebook" : "file";
}

nlohmann::json model_for(services& s, const located& l, const entry_info& e, bool with_content,
                         const std::optional<std::string>& want_type, const std::optional<std::string>& want_format) {
    std::string type = want_type.value_or(type_of(e));
    if (e.type == entry_type::directory && type != "directory") throw api_exception(400, l.full(e.path) + " is a directory");
    if (e.type != entry_type::directory && type == "directory") throw api_exception(400, l.full(e.path) + " is not a directory");
    auto m = base_model(l, e, type);
    if (type == "directory") {
        if (with_content) {
            // One more than shown, for the checkpoint folder, which is hidden as jupyter_server hides it.
            auto listed = l.store->list(e.path, s.max_listed_entries + 1);
            auto list = nlohmann::json::array();
            for (const auto& child : listed.entries) {
                if (child.name == contents::checkpoint_dir_name) continue;
                if (list.size() == s.max_listed_entries) {
                    listed.truncated = true;
                    break;
                }
                list.push_back(model_for(s, l, child, false, std::nullopt, std::nullopt));
            }
            m["content"] = std::move(list);
            m["format"] = "json";
            // Not in Jupyter's model; JupyterLab ignores members it does not know. See docs/jupyter.md.
            if (listed.truncated) m["truncated"] = true;
        }
        return m;
    }
    m["mimetype"] = type == "notebook" ? nlohmann::json(nullptr) : nlohmann::json(std::string(contents::mime_type_for(e.name)));
    if (!with_content) return m;
    const auto cap = type == "notebook" ? s.max_notebook_bytes : s.max_read_bytes;
    if (e.size > cap)
        throw api_exception(413, l.full(e.path) + " is larger than " + std::to_string(cap) +
                                     " bytes; read it through /files/" + url_encode_path(l.full(e.path)));
    const auto data = l.store->read(e.path, cap);
    if (type == "notebook") {
        // The kernel wrote this file: a deep one would overflow the stack in dump().
        if (!json_nesting_within(data, max_body_json_depth)) throw api_exception(400, "Unreadable notebook: " + l.full(e.path));
        auto nb = nlohmann::json::parse(data, nullptr, false);
        if (nb.is_discarded() || !nb.is_object()) throw api_exception(400, "Unreadable notebook: " + l.full(e.path));
        m["content"] = std::move(nb);
        m["format"] = "json";
        return m;
    }
    // NUL is valid UTF-8 but JSON makes six bytes of it: such data goes as base64.
    const auto format = want_format.value_or(is_valid_utf8(data) && !has_control_bytes(data) ? "text" : "base64");
    if (format == "text") {
        if (!is_valid_utf8(data)) throw api_exception(400, l.full(e.path) + " is not UTF-8 encoded");
        if (json_escaped_size(data) > s.max_model_text_bytes)
            throw api_exception(413, l.full(e.path) + " is too large as JSON text; read it through /files/");
        m["content"] = data;
        m["format"] = "text";
        if (m["mimetype"] == "application/octet-stream") m["mimetype"] = "text/plain";
    } else if (format == "base64") {
        m["content"] = base64_encode(data);
        m["format"] = "base64";
    } else {
        throw api_exception(400, "Unknown format '" + format.substr(0, 32) + "'");
    }
    return m;
}

nlohmann::json root_model(services& s, const request_ptr& req, bool with_content) {
    // The root is virtual (the caller's kernels); clients require string dates.
    const auto now = kernels::iso8601(std::chrono::system_clock::now());
    nlohmann::json m = {{"name", ""},          {"path", ""},          {"type", "directory"}, {"created", now},
                        {"last_modified", now}, {"content", nullptr}, {"format", nullptr},   {"mimetype", nullptr},
                        {"size", nullptr},     {"writable", false},   {"hash", nullptr},     {"hash_algorithm", nullptr}};
    if (with_content) {
        auto list = nlohmann::json::array();
        for (const auto& k : s.kernels.list(req->who.tenant)) {
            const auto model = k->model();
            list.push_back({{"name", k->id()},          {"path", k->id()},        {"type", "directory"},
                            {"created", model["last_activity"]}, {"last_modified", model["last_activity"]},
                            {"content", nullptr},       {"format", nullptr},      {"mimetype", nullptr},
                            {"size", nullptr},          {"writable", true},       {"hash", nullptr},
                            {"hash_algorithm", nullptr}});
        }
        m["content"] = std::move(list);
        m["format"] = "json";
    }
    return m;
}

nlohmann::json checkpoint_model(const entry_info& e) {
    return {{"id", "checkpoint"}, {"last_modified", iso_from_ns(e.mtime_ns)}};
}

// /api/contents/<path>/checkpoints[/<id>] arrives as part of {path*}.
bool split_checkpoint(std::string& path, std::optional<std::string>& checkpoint_id) {
    if (path.ends_with("/checkpoints")) {
        path.resize(path.size() - 12);
        return true;
    }
    const auto pos = path.rfind("/checkpoints/");
    if (pos != std::string::npos && path.find('/', pos + 13) == std::string::npos) {
        checkpoint_id = path.substr(pos + 13);
        path.resize(pos);
        return true;
    }
    return false;
}

// One checkpoint per file ("checkpoint"), as jupyter_server's FileCheckpoints.
void handle_checkpoints(services& s, const request_ptr& req, const reply_fn& reply, const std::string& path,
                        const std::optional<std::string>& id) {
    auto l = locate(s, req, path);
    if (l.rel.empty()) throw api_exception(400, "The workspace root has no checkpoints");
    const auto method = req->req.method();
    if (!id && method == bhttp::verb::get) {
        auto list = nlohmann::json::array();
        if (const auto cp = guarded([&] { return contents::find_checkpoint(*l.store, l.rel); })) list.push_back(checkpoint_model(*cp));
        return reply(json_response(200, list));
    }
    if (!id && method == bhttp::verb::post) {
        const auto cp = guarded([&] { return contents::create_checkpoint(*l.store, l.rel); });
        return reply(json_response(201, checkpoint_model(cp)));
    }
    if (id && *id != "checkpoint") throw api_exception(404, "No such checkpoint");
    if (id && method == bhttp::verb::post) {
        guarded([&] {
            contents::restore_checkpoint(*l.store, l.rel);
            return 0;
        });
        return reply(empty_response(204));
    }
    if (id && method == bhttp::verb::delete_) {
        if (!guarded([&] { return contents::delete_checkpoint(*l.store, l.rel); })) throw api_exception(404, "No such checkpoint");
        return reply(empty_response(204));
    }
    throw api_exception(405, "Method not allowed on checkpoints");
}

// The contents root is virtual: one folder per kernel of the caller, made
// by starting a kernel, never by creating a folder.
[[noreturn]] void refuse_root_folder() {
    throw api_exception(403, "The contents root holds one folder per kernel; start a kernel to get a new folder, "
                             "or create folders inside a kernel's folder");
}

bool is_root_level(const std::string& path) {
    std::string p = path;
    while (!p.empty() && p.back() == '/') p.pop_back();
    while (!p.empty() && p.front() == '/') p.erase(0, 1);
    return p.find('/') == std::string::npos;
}

// For creating: a name at the root that is no kernel of the caller would be a new root folder.
located locate_or_refuse_root(services& s, const request_ptr& req, const std::string& path) {
    if (is_root_level(path)) {
        std::string name = path;
        while (!name.empty() && name.back() == '/') name.pop_back();
        while (!name.empty() && name.front() == '/') name.erase(0, 1);
        if (name.empty() || !s.kernels.find(req->who.tenant, name)) refuse_root_folder();
    }
    return locate(s, req, path);
}

std::optional<std::string> query_opt(const request_ptr& req, const char* key) {
    auto v = req->query_value(key);
    if (v && v->empty()) return std::nullopt;
    return v;
}

void get_contents(services& s, const request_ptr& req, const reply_fn& reply, std::string path) {
    std::optional<std::string> checkpoint_id;
    const auto original = path;
    if (split_checkpoint(path, checkpoint_id)) {
        // A real entry named "checkpoints" wins over the checkpoint listing.
        auto l = locate(s, req, original.substr(0, original.find_last_of('/')));
        bool real = false;
        try {
            real = !checkpoint_id && l.store->exists(contents_store::check_path(l.rel.empty() ? "checkpoints" : l.rel + "/checkpoints"));
        } catch (const contents_error&) {
        }
        if (!real) return handle_checkpoints(s, req, reply, path, checkpoint_id);
        path = original;
    }
    const bool with_content = req->query_value("content").value_or("1") != "0";
    std::string p = path;
    while (!p.empty() && (p.front() == '/')) p.erase(0, 1);
    while (!p.empty() && (p.back() == '/')) p.pop_back();
    if (p.empty()) {
        // On a cluster node the root holds every node's workspaces.
        if (!with_content) return reply(json_response(200, root_model(s, req, false)));
        return reply_list(s, req, std::move(reply), root_model(s, req, true), "content");
    }
    auto l = locate(s, req, p);
    const auto model = guarded([&] {
        const auto e = l.store->stat(l.rel);
        return model_for(s, l, e, with_content, query_opt(req, "type"), query_opt(req, "format"));
    });
    auto res = json_response(200, model);
    if (model.contains("truncated")) res.headers.emplace_back("X-Cellgate-Truncated", std::to_string(s.max_listed_entries));
    reply(std::move(res));
}

void put_contents(services& s, const request_ptr& req, const reply_fn& reply, std::string path) {
    std::optional<std::string> checkpoint_id;
    if (split_checkpoint(path, checkpoint_id)) throw api_exception(405, "Use POST to create a checkpoint");
    const auto body = req->json_body(false);
    auto l = locate_or_refuse_root(s, req, path);
    if (l.rel.empty()) throw api_exception(400, "The workspace root itself cannot be replaced");
    const auto type = body.value("type", std::string(is_notebook_name(l.rel) ? "notebook" : "file"));
    const bool existed = guarded([&] { return l.store->exists(l.rel); });
    const auto saved = guarded([&]() -> entry_info {
        if (type == "directory") return existed ? l.store->stat(l.rel) : l.store->make_dir(l.rel);
        const auto payload = contents_payload_from(body, type);
        if (!payload.data) {
            if (existed) return l.store->stat(l.rel);
            return l.store->write(l.rel, "");
        }
        // Chunked upload as JupyterLab sends it: chunk 1 starts the file, later
        // chunks append, -1 is the last one.
        if (payload.chunk && *payload.chunk != 1) return l.store->append(l.rel, *payload.data);
        return l.store->write(l.rel, *payload.data);
    });
    auto model = guarded([&] { return model_for(s, l, saved, false, std::nullopt, std::nullopt); });
    auto res = json_response(existed ? 200 : 201, model);
    res.headers.emplace_back("Location", "/api/contents/" + url_encode_path(l.full(saved.path)));
    reply(std::move(res));
}

void post_contents(services& s, const request_ptr& req, const reply_fn& reply, std::string path) {
    std::optional<std::string> checkpoint_id;
    if (split_checkpoint(path, checkpoint_id)) return handle_checkpoints(s, req, reply, path, checkpoint_id);
    const auto body = req->json_body();
    auto l = locate_or_refuse_root(s, req, path);
    const auto saved = guarded([&]() -> entry_info {
        const auto dir = l.store->stat(l.rel);
        if (dir.type != entry_type::directory) throw api_exception(400, "POST creates inside a directory");
        const auto wanted = new_entry_from(body);
        if (wanted.copy_from) {
            // copy_from is a contents path in the same workspace.
            auto src = locate(s, req, *wanted.copy_from);
            if (src.kernel->id() != l.kernel->id()) throw api_exception(400, "copy_from must be in the same workspace");
            const auto src_name = fs::path(src.rel).filename().string();
            const auto dot = src_name.find('.', 1);
            const auto stem = (dot == std::string::npos ? src_name : src_name.substr(0, dot)) + "-Copy";
            const auto ext = dot == std::string::npos ? std::string() : src_name.substr(dot);
            const auto name = l.store->untitled_name(l.rel, stem, ext);
            return l.store->copy(src.rel, l.rel.empty() ? name : l.rel + "/" + name);
        }
        const auto& type = wanted.type;
        const auto& ext = wanted.ext;
        const auto name = l.store->untitled_name(l.rel, type == "directory" ? "Untitled Folder" : "Untitled", type == "directory" ? "" : ext);
        const auto target = l.rel.empty() ? name : l.rel + "/" + name;
        if (type == "directory") return l.store->make_dir(target);
        if (type == "notebook")
            return l.store->write(target, nlohmann::json({{"cells", nlohmann::json::array()},
                                                          {"metadata", nlohmann::json::object()},
                                                          {"nbformat", 4},
                                                          {"nbformat_minor", 5}})
                                              .dump(1));
        return l.store->write(target, "");
    });
    auto res = json_response(201, guarded([&] { return model_for(s, l, saved, false, std::nullopt, std::nullopt); }));
    res.headers.emplace_back("Location", "/api/contents/" + url_encode_path(l.full(saved.path)));
    reply(std::move(res));
}

void patch_contents(services& s, const request_ptr& req, const reply_fn& reply, const std::string& path) {
    const auto body = req->json_body(false);
    const auto to = rename_target_from(body);
    auto from = locate(s, req, path);
    auto dest = locate(s, req, to);
    if (from.kernel->id() != dest.kernel->id()) throw api_exception(400, "Cannot move files between workspaces");
    if (from.rel.empty() || dest.rel.empty()) throw api_exception(400, "The workspace root cannot be renamed");
    const auto moved = guarded([&] { return from.store->rename(from.rel, dest.rel); });
    if (moved.type == entry_type::file) {
        // A directory's checkpoints are inside it and move with it.
        try {
            contents::move_checkpoint(*from.store, from.rel, dest.rel);
        } catch (const contents_error& e) {
            spdlog::info("kernel {}: the checkpoint did not follow a rename: {}", from.kernel->id(), e.what());
        }
    }
    reply(json_response(200, guarded([&] { return model_for(s, dest, moved, false, std::nullopt, std::nullopt); })));
}

void delete_contents(services& s, const request_ptr& req, const reply_fn& reply, std::string path) {
    std::optional<std::string> checkpoint_id;
    if (split_checkpoint(path, checkpoint_id)) return handle_checkpoints(s, req, reply, path, checkpoint_id);
    auto l = locate(s, req, path);
    if (l.rel.empty()) throw api_exception(400, "Delete the kernel to remove its workspace");
    guarded([&] {
        const auto e = l.store->stat(l.rel);
        if (e.type == entry_type::directory) {
            // As jupyter_server: a folder holding only its (hidden) checkpoints counts as empty.
            const auto listed = l.store->list(l.rel, 2);
            for (const auto& child : listed.entries)
                if (child.name != contents::checkpoint_dir_name)
                    throw api_exception(400, "Directory " + l.full(l.rel) + " is not empty");
            l.store->remove(l.rel, true);
            return 0;
        }
        l.store->remove(l.rel);
        try {
            contents::delete_checkpoint(*l.store, l.rel);
        } catch (const contents_error& ce) {
            spdlog::info("kernel {}: the checkpoint of a deleted file stays: {}", l.kernel->id(), ce.what());
        }
        return 0;
    });
    reply(empty_response(204));
}

void get_file(services& s, const request_ptr& req, const reply_fn& reply, const std::string& path) {
    auto l = locate(s, req, path);
    std::uint64_t size = 0;
    const int fd = guarded([&] { return l.store->open_for_read(l.rel, size); });
    response res;
    const auto name = fs::path(l.rel).filename().string();
    res.content_type = std::string(contents::mime_type_for(name));
    res.file_fd = fd;
    res.file_size = size;
    // Kernel-written files are hostile content: never let them run script in
    // the gateway's origin.
    res.headers.emplace_back("Content-Security-Policy", "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'");
    if (req->query.count("download") != 0 && req->query_value("download") != "0")
        res.headers.emplace_back("Content-Disposition", attachment_disposition(name));
    reply(std::move(res));
}

}  // namespace

void register_contents_api(router& r, services& s) {
    // Each handler runs on the file-I/O pool; its shape is a plain handler's.
    using contents_handler = void (*)(services&, const request_ptr&, const reply_fn&, std::string);
    const auto on_pool = [&s](contents_handler h) {
        return [&s, h](const request_ptr& req, reply_fn reply) {
            run_file_work(s, req, std::move(reply), [&s, h, req](const reply_fn& rep) { h(s, req, rep, req->param("path")); });
        };
    };
    const std::string p = "/api/contents/{path*}";
    r.add(bhttp::verb::get, p, on_pool(&get_contents));
    r.add(bhttp::verb::put, p, on_pool(&put_contents));
    r.add(bhttp::verb::post, p, on_pool(&post_contents));
    r.add(bhttp::verb::patch, p, on_pool([](services& svc, const request_ptr& req, const reply_fn& rep, std::string path) { patch_contents(svc, req, rep, path); }));
    r.add(bhttp::verb::delete_, p, on_pool(&delete_contents));
    r.add(bhttp::verb::get, "/files/{path*}", on_pool([](services& svc, const request_ptr& req, const reply_fn& rep, std::string path) { get_file(svc, req, rep, path); }));
}

}  // namespace cellgate::jupyter
