// The MCP tools' calls (server.hpp): each tool over the core (sessions,
// cells, snapshots, fork), the file tools on the file-I/O pool, and
// resources/read. Each answers through `done` exactly once (or not at all
// once cancelled).
#include "mcp/server.hpp"

#include "contents/contents_store.hpp"
#include "kit/request_models.hpp"
#include "mcp/tools.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace cellgate::mcp {

using namespace http;

std::string failure_text(const kernels::failure& f) {
    using k = kernels::failure_kind;
    std::string hint;
    if (f.kind == k::over_quota) hint = " Close a session you no longer need (close_session) or reuse a session_id.";
    if (f.kind == k::start_failed || f.kind == k::unavailable) hint = " Try again in a few seconds.";
    return "Could not start a session: " + f.message + "." + hint;
}

std::string not_found_text(const std::string& id) {
    return "Session '" + id.substr(0, 64) +
           "' not found: it ended (idle timeout, lifetime or close_session) or is not yours. Omit session_id to "
           "start a new session.";
}

std::string session_text(const kernels::kernel& k, const kernels::kernelspec* spec) {
    const auto m = kit::session_model(k, spec);
    std::string t = "session_id: " + m["id"].get<std::string>() + "\nkernel: " + m["kernel"].get<std::string>() +
                    "\nstate: " + m["state"].get<std::string>() + "\ncreated: " + m["created"].get<std::string>() +
                    "\nlast_activity: " + m["last_activity"].get<std::string>() + "\n";
    if (m["expires_at"].is_string()) t += "expires_at: " + m["expires_at"].get<std::string>() + "\n";
    const auto& l = m["limits"];
    t += "limits: cell timeout " + l["timeout_s"].dump() + " s, idle timeout " + l["idle_timeout_s"].dump() + " s";
    if (l.contains("memory_bytes")) t += ", memory " + std::to_string(l["memory_bytes"].get<std::uint64_t>() >> 20) + " MiB";
    return t + "\n";
}

std::string optional_string(const json& args, const char* key) {
    const auto it = args.find(key);
    return it == args.end() || it->is_null() ? std::string() : it->get<std::string>();
}

void server::run_tool(const std::string& tenant, const std::string& name, const json& args,
                      const std::shared_ptr<call_state>& call, const done_fn& done) {
    // Errors become isError results the model can act on (SEP-1303).
    auto safe_done = [done](json r) { done(std::move(r)); };
    try {
        if (name == "execute_code") return execute_code(tenant, args, call, safe_done);
        if (name == "create_session") return create_session(tenant, args, safe_done);
        if (name == "close_session") return close_session(tenant, args, safe_done);
        if (name == "snapshot_session") return snapshot_session(tenant, args, safe_done);
        if (name == "fork_session") return fork_session(tenant, args, safe_done);
        if (name == "write_file") return write_file(tenant, args, safe_done);
        if (name == "read_file") return read_file(tenant, args, safe_done);
        if (name == "list_files") return list_files(tenant, args, safe_done);
        if (name == "list_sessions") {
            std::string t;
            for (const auto& k : s_.kernels.list(tenant))
                t += session_text(*k, s_.kernels.specs().find(k->spec_name())) + "\n";
            return safe_done(text_result(t.empty() ? "No open sessions." : t));
        }
    } catch (const api_exception& e) {
        return safe_done(text_result(e.what(), true));
    } catch (const contents::contents_error& e) {
        return safe_done(text_result(e.what(), true));
    } catch (const std::exception& e) {
        spdlog::error("MCP tool {}: {}", name, e.what());
        return safe_done(text_result("Internal error", true));
    }
}

namespace {

// A kernel's language as execute_code names it: "python", "r", "javascript",
// "typescript", "bash".
std::string language_of(const kernels::kernelspec* spec) { return spec ? kernels::normalize_language(spec->language) : "python"; }

// The kernelspec a new session for `language` runs: the default for Python,
// else the listed operator kernelspec of that language. Empty: none here.
std::string spec_for_language(const kernels::kernelspec_registry& specs, const std::string& language) {
    if (language == "python") return specs.default_name();
    for (const auto& [name, spec] : specs.all())
        if (spec.listed && name != "code-interpreter" && kernels::normalize_language(spec.language) == language) return name;
    return {};
}

}  // namespace

void server::execute_code(const std::string& tenant, const json& args, const std::shared_ptr<call_state>& call,
                          const done_fn& done) {
    const auto sid = optional_string(args, "session_id");
    const auto asked = optional_string(args, "language");
    const auto language = asked.empty() ? std::string() : kernels::normalize_language(asked);
    if (!sid.empty()) {
        const auto k = s_.kernels.find(tenant, sid);
        if (!k) return done(text_result(not_found_text(sid), true));
        const auto has = language_of(s_.kernels.specs().find(k->spec_name()));
        if (!language.empty() && language != has)
            return done(text_result("Session " + sid + " runs " + has + ", not " + language.substr(0, 40) +
                                        ": call execute_code without session_id to start a " + language.substr(0, 40) +
                                        " session",
                                    true));
        return run_cell(k, false, args, call, done);
    }
    auto request = core::session_for(tenant);
    if (!language.empty()) {
        request.kernelspec = spec_for_language(s_.kernels.specs(), language);
        if (request.kernelspec.empty()) {
            std::string have;
            for (const auto& l : {"python", "r", "javascript", "typescript", "bash"})
                if (!spec_for_language(s_.kernels.specs(), l).empty()) have += (have.empty() ? "" : ", ") + std::string(l);
            return done(text_result("No " + language.substr(0, 40) + " kernel on this server (it has: " + have + ")", true));
        }
    }
    s_.core->start(std::move(request),
                             [self = shared_from_this(), args, call, done](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                                 if (e) return done(text_result(failure_text(*e), true));
                                 try {
                                     self->run_cell(k, true, args, call, done);
                                 } catch (const api_exception& ex) {
                                     done(text_result(ex.what(), true));
                                 }
                             });
}

void server::run_cell(const kernels::kernel_ptr& k, bool fresh, const json& args, const std::shared_ptr<call_state>& call,
                      const done_fn& done) {
    // A paused session resumes when its policy lets it; a dead kernel is revived and the cell refused.
    if (const auto no = s_.cells->ready(k)) return done(text_result(no->why.message, true));
    const auto policy_timeout = k->policy().exec_timeout.count();
    json ask = {{"code", args["code"]}};
    ask["timeout_s"] = args.contains("timeout_s") && !args["timeout_s"].is_null()
                           ? args["timeout_s"]
                           : json(std::min<long>(options_.default_cell_timeout.count(), policy_timeout > 0 ? policy_timeout : 3600));
    // MCP results always have a budget: the model's, or 24 KiB.
    render_limits limits;
    if (args.contains("max_output_tokens") && args["max_output_tokens"].is_number_integer())
        limits.text_bytes = args["max_output_tokens"].get<std::size_t>() * agent::bytes_per_token;
    ask["max_output_bytes"] = std::max<std::size_t>(limits.text_bytes, core::min_budget_bytes);
    auto cell = kit::cell_request_from(ask);
    cell.output_at = kit::whole_output_at(k->id());
    cell.surface = "mcp";
    auto opts = s_.cells->options(*k, cell);
    {
        std::lock_guard lock(call->mutex);
        if (call->cancelled) return;
        call->kernel_id = k->id();
    }
    auto exec = s_.cells->run(
        k, std::move(opts),
        [call](const std::string& event, const json& data) {
            if (event != "stdout" && event != "stderr") return;
            auto text = data.value("text", "");
            while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
            if (const auto nl = text.find_last_of('\n'); nl != std::string::npos) text = text.substr(nl + 1);
            if (text.empty()) return;
            if (text.size() > 200) text = text.substr(0, utf8_complete_length(std::string_view(text).substr(0, 200))) + "…";
            std::lock_guard lock(call->mutex);
            call->last_output = std::move(text);
        },
        [id = k->id(), fresh, limits, done](json result) { done(render_execution(result, id, fresh, limits)); });
    bool cancelled = false;
    {
        std::lock_guard lock(call->mutex);
        call->exec = exec;
        cancelled = call->cancelled;
    }
    if (cancelled) s_.cells->cancel(k->id(), exec);  // cancelled while it was being submitted
}

void server::create_session(const std::string& tenant, const json& args, const done_fn& done) {
    // create_session's arguments are POST /v1/sessions's names, with its rules.
    s_.core->start(kit::session_request_from(args, tenant),
                             [self = shared_from_this(), done](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                                 if (e) return done(text_result(failure_text(*e), true));
                                 done(text_result(session_text(*k, self->s_.kernels.specs().find(k->spec_name()))));
                             });
}

void server::snapshot_session(const std::string& tenant, const json& args, const done_fn& done) {
    const auto sid = args["session_id"].get<std::string>();
    const auto k = s_.kernels.find(tenant, sid);
    if (!k) return done(text_result(not_found_text(sid), true));
    s_.kernels.snapshot(k, optional_string(args, "name"), [done](std::optional<kernels::failure> f, kernels::snapshot_record snap) {
        if (f) return done(text_result(failure_text(*f), true));
        done(text_result("snapshot_id: " + snap.id + "\nname: " + snap.name + "\nof session: " + snap.source +
                         "\nkept: its files (" + std::to_string(snap.bytes >> 20) +
                         " MiB workspace); variables are not kept\nStart a session from it: create_session with "
                         "from_snapshot=\"" + snap.id + "\"."));
    });
}

void server::fork_session(const std::string& tenant, const json& args, const done_fn& done) {
    const auto sid = args["session_id"].get<std::string>();
    const auto k = s_.kernels.find(tenant, sid);
    if (!k) return done(text_result(not_found_text(sid), true));
    const std::size_t count = args.contains("count") && args["count"].is_number_integer() ? args["count"].get<std::size_t>() : 1;
    s_.kernels.fork(k, count, "", [done, sid](std::optional<kernels::failure> f, kernels::snapshot_record snap,
                                              std::vector<kernels::kernel_ptr> children) {
        if (f) return done(text_result(failure_text(*f), true));
        std::string t = "Forked session " + sid + " into " + std::to_string(children.size()) +
                        " new session(s), each with its own copy of its files (variables are not carried over):\n";
        for (const auto& c : children) t += "session_id: " + c->id() + "\n";
        t += "snapshot_id: " + snap.id + " (start more from it with create_session from_snapshot)";
        done(text_result(t));
    });
}

void server::close_session(const std::string& tenant, const json& args, const done_fn& done) {
    const auto sid = args["session_id"].get<std::string>();
    const auto k = s_.kernels.find(tenant, sid);
    if (!k) return done(text_result(not_found_text(sid), true));
    s_.sessions.remove_for_kernel(k->id());
    s_.kernels.shutdown(k, [sid, done](std::optional<kernels::failure> e) {
        done(e ? text_result("Could not close session " + sid + ": " + e->message, true) : text_result("closed " + sid));
    }, "closed through MCP");
}

void server::with_session(const std::string& tenant, const json& args, bool create,
                          std::function<void(kernels::kernel_ptr, bool)> then, const done_fn& done) {
    const auto sid = optional_string(args, "session_id");
    if (!sid.empty() || !create) {
        const auto k = s_.kernels.find(tenant, sid);
        if (!k) return done(text_result(not_found_text(sid), true));
        return then(k, false);
    }
    s_.core->start(core::session_for(tenant),
                             [then, done](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                                 if (e) return done(text_result(failure_text(*e), true));
                                 then(k, true);
                             });
}

void server::on_file_pool(const std::string& tenant, const done_fn& done, std::function<json()> work) {
    auto job = [done, work = std::move(work)] {
        try {
            done(work());
        } catch (const api_exception& e) {
            done(text_result(e.what(), true));
        } catch (const contents::contents_error& e) {
            done(text_result(e.what(), true));
        } catch (const std::exception& e) {
            spdlog::error("MCP file tool: {}", e.what());
            done(text_result("Internal error", true));
        }
    };
    if (s_.file_io == nullptr) return job();
    if (s_.file_io->submit(tenant, job) != util::file_io_pool::admission::accepted)
        done(text_result("Too many file operations are waiting; try again shortly", true));
}

void server::write_file(const std::string& tenant, const json& args, const done_fn& done) {
    const auto path = contents::contents_store::check_path(args["path"].get<std::string>());
    if (path.empty()) throw api_exception(400, "'path' must name a file");
    std::string data = args["content"].get<std::string>();
    if (args.value("encoding", "utf-8") == "base64") {
        auto decoded = base64_decode(data);
        if (!decoded) throw api_exception(400, "'content' is not valid base64");
        data = std::move(*decoded);
    }
    with_session(tenant, args, true, [this, tenant, path, data = std::move(data), done](kernels::kernel_ptr k, bool fresh) {
        if (data.size() > k->policy().upload_limit_bytes)
            return done(text_result("The file is larger than the session's upload limit (" +
                                        std::to_string(k->policy().upload_limit_bytes) + " bytes)", true));
        on_file_pool(tenant, done, [k, fresh, path, data] {
            const auto store = core::open_files(k);
            k->touch();
            store->make_parents(path);
            const auto info = store->write(path, data);
            return text_result("wrote " + info.path + " (" + std::to_string(info.size) + " bytes)\nsession_id: " + k->id() +
                               (fresh ? " (a new session: pass this session_id to later calls)" : "") + "\n");
        });
    }, done);
}

void server::read_file(const std::string& tenant, const json& args, const done_fn& done) {
    const auto path = contents::contents_store::check_path(args["path"].get<std::string>());
    const auto max_bytes = std::min<std::size_t>(args.contains("max_bytes") ? args["max_bytes"].get<std::size_t>() : default_read_bytes,
                                                 max_read_bytes);
    with_session(tenant, args, false, [this, tenant, path, max_bytes, done](kernels::kernel_ptr k, bool) {
        on_file_pool(tenant, done, [k, path, max_bytes] {
            const auto store = core::open_files(k);
            k->touch();
            const auto info = store->stat(path);
            if (info.type == contents::entry_type::directory)
                return text_result(path + " is a directory: use list_files", true);
            const std::string mime(contents::mime_type_for(info.name));
            const auto uri = file_uri(k->id(), info.path);
            const bool image = mime == "image/png" || mime == "image/jpeg" || mime == "image/gif" || mime == "image/webp";
            if (image && info.size <= max_image_read_bytes) {
                const auto bytes = store->read(path, max_image_read_bytes);
                json caption = {{"type", "text"}, {"text", info.path + " (" + std::to_string(info.size) + " bytes, " + mime + ")"}};
                json picture = {{"type", "image"}, {"data", base64_encode(bytes)}, {"mimeType", mime}};
                return json{{"content", json::array({std::move(caption), std::move(picture)})}};
            }
            std::string head;
            if (!image) {
                std::uint64_t size = 0;
                const int fd = store->open_for_read(path, size);
                head.resize(std::min<std::uint64_t>(size, max_bytes));
                std::size_t got = 0;
                while (got < head.size()) {
                    const auto n = ::read(fd, head.data() + got, head.size() - got);
                    if (n <= 0) break;
                    got += static_cast<std::size_t>(n);
                }
                ::close(fd);
                head.resize(got);
            }
            const auto whole = utf8_complete_length(head);
            if (!image && !has_control_bytes(head) && is_valid_utf8(std::string_view(head).substr(0, whole))) {
                head.resize(whole);
                if (info.size > head.size())
                    head += "\n… [" + std::to_string(info.size - head.size()) + " more bytes; raise max_bytes or read it as " + uri + "]";
                return text_result(head);
            }
            json summary = {{"type", "text"},
                            {"text", info.path + ": " + std::to_string(info.size) + " bytes of " + mime + " (not text" +
                                         (image ? ", too large to send as an image" : "") + "); read it as the resource " + uri}};
            json link = {{"type", "resource_link"}, {"uri", uri}, {"name", info.path}, {"mimeType", mime}, {"size", info.size}};
            return json{{"content", json::array({std::move(summary), std::move(link)})}};
        });
    }, done);
}

void server::list_files(const std::string& tenant, const json& args, const done_fn& done) {
    const auto dir = contents::contents_store::check_path(optional_string(args, "path"));
    with_session(tenant, args, false, [this, tenant, dir, done](kernels::kernel_ptr k, bool) {
        on_file_pool(tenant, done, [k, dir] {
            const auto store = core::open_files(k);
            k->touch();
            const auto listed = store->list(dir, max_listed);
            std::string t = "path: /" + dir + "\n";
            for (const auto& e : listed.entries) {
                const bool is_dir = e.type == contents::entry_type::directory;
                t += (is_dir ? "dir   " : "file  ") + e.path + (is_dir ? "/" : "  " + std::to_string(e.size) + " bytes") +
                     "  " + kernels::iso8601(std::chrono::system_clock::time_point(
                                std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(e.mtime_ns)))) +
                     "\n";
            }
            if (listed.entries.empty()) t += "(empty)\n";
            if (listed.truncated) t += "[more entries than the " + std::to_string(max_listed) + " listed]\n";
            return text_result(t);
        });
    }, done);
}

void server::read_resource(const request_ptr& req, const json& id, const json& params, const reply_fn& reply) {
    const auto uri = params.contains("uri") && params["uri"].is_string() ? params["uri"].get<std::string>() : std::string();
    const auto ref = parse_file_uri(uri);
    if (!ref) return reply(rpc_error(200, id, invalid_params, "Not a cellgate resource URI: " + uri.substr(0, 200)));
    const auto k = s_.kernels.find(req->who.tenant, ref->session_id);
    if (!k) return reply(rpc_error(200, id, resource_not_found, "Resource not found: " + uri.substr(0, 200)));
    on_file_pool(req->who.tenant,
                 [reply, id, uri](json r) {
                     if (r.value("isError", false))
                         return reply(rpc_error(200, id, resource_not_found,
                                                "Resource not found: " + r["content"][0].value("text", "")));
                     reply(rpc_reply(200, rpc_message(id, std::move(r))));
                 },
                 [k, ref, uri] {
                     const auto store = core::open_files(k);
                     const auto path = contents::contents_store::check_path(ref->path);
                     const auto info = store->stat(path);
                     const std::string mime(contents::mime_type_for(info.name));
                     const auto data = store->read(path, max_read_bytes);
                     json item = {{"uri", uri}, {"mimeType", mime}};
                     if (!has_control_bytes(data) && is_valid_utf8(data)) item["text"] = data;
                     else item["blob"] = base64_encode(data);
                     return json{{"contents", json::array({item})}};
                 });
}

}  // namespace cellgate::mcp
