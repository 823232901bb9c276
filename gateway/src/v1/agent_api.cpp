// The agent API (/v1): sessions, execute (JSON or Server-Sent Events), files,
// and one-shot execution. See docs/agent-api.md for the contract.
#include "agent/agent_service.hpp"
#include "v1/v1_api.hpp"
#include "core/network.hpp"
#include "core/runs.hpp"
#include "core/runtimes.hpp"
#include "contents/beneath.hpp"
#include "contents/contents_store.hpp"
#include "contents/workspace_export.hpp"
#include "contents/workspace_import.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"
#include "util/every.hpp"
#include "cellgate/protocol/message.hpp"
#include "util/multipart.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>

namespace cellgate::v1 {

using namespace kit;

using namespace http;
using nlohmann::json;
using contents::contents_error;
using contents::contents_store;

namespace {

std::unique_ptr<contents_store> store_of(const kernels::kernel_ptr& k) { return open_files(k); }

std::string files_url(const std::string& session_id) { return "/v1/sessions/" + session_id + "/files/"; }

std::string executions_url(const std::string& session_id, const std::string& execution_id) {
    return "/v1/sessions/" + session_id + "/executions/" + execution_id;
}

// The /v1 links in a result or event from the core, which names none: each
// changed file's URL, where a budgeted cell's whole output is read, and each
// downscaled image's original.
void link_files(json& files, const std::string& session_id) {
    for (auto& f : files)
        if (f.is_object() && f["path"].is_string()) f["url"] = files_url(session_id) + url_encode_path(f["path"].get<std::string>());
}
// A one-shot run links no file (its sandbox is gone) and keeps no output.
void link_result(json& result, const std::string& session_id, bool files = true) {
    if (files) link_files(result["files"], session_id);
    const auto at = executions_url(session_id, result.value("execution_id", ""));
    if (const auto b = result.find("budget"); b != result.end() && b->is_object())
        (*b)["output_url"] = b->value("output_kept", false) ? json(at + "/output") : json(nullptr);
    for (auto& r : result["results"])
        if (const auto m = r.find("metadata"); m != r.end() && m->is_object() && m->contains("cellgate"))
            if (auto& note = (*m)["cellgate"]; note.is_object() && note.contains("original") && note["original"].is_number_unsigned())
                note["original_url"] = at + "/images/" + std::to_string(note["original"].get<std::uint64_t>());
}

// A /v1 cell: the body as the core's request, and where its cut streams are read whole.
core::cell_request v1_cell(const json& body, const std::string& session_id) {
    auto r = cell_request_from(body);
    r.output_at = whole_output_at(session_id);
    return r;
}

// Runs one execution and replies with JSON, or streams it as SSE with
// keepalives; a streaming client that disconnects gets its cell interrupted.
void run_and_reply(core::executions& cells, const kernels::kernel_ptr& k, agent::execution_options opts,
                   const request_ptr& req, reply_fn reply) {
    const auto id = k->id();
    if (!wants_event_stream(req)) {
        cells.run(k, std::move(opts), {}, [reply, id](json result) {
            link_result(result, id);
            reply(json_response(200, result));
        });
        return;
    }
    response res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("X-Accel-Buffering", "no");
    res.stream = [&cells, k, id, opts = std::move(opts)](std::shared_ptr<stream_sink> sink) mutable {
        auto stop_keepalive = std::make_shared<std::function<void()>>(
            util::every(cells.agents().io(), std::chrono::seconds(15), [sink] { sink->write(": keepalive\n\n"); }));
        auto e = cells.run(
            k, std::move(opts),
            [sink, id](const std::string& event, const json& data) {
                if (event == "end") return;
                if (event != "files") return sink->write(sse_event(event, data));
                auto linked = data;
                link_files(linked["files"], id);
                sink->write(sse_event(event, linked));
            },
            [sink, stop_keepalive, id](json result) {
                link_result(result, id);
                sink->write(sse_event("end", result));
                sink->close();
                (*stop_keepalive)();
            });
        sink->on_disconnect([&cells, k, e] {
            spdlog::info("kernel {}: the streaming client went away; interrupting its execution", k->id());
            cells.cancel(k->id(), e);
        });
    };
    reply(std::move(res));
}

json file_entry(const std::string& session_id, const contents::entry_info& e) {
    const bool dir = e.type == contents::entry_type::directory;
    return {{"name", e.name},
            {"path", e.path},
            {"type", dir ? "directory" : "file"},
            {"size", dir ? json(nullptr) : json(e.size)},
            {"mime_type", dir ? json(nullptr) : json(std::string(contents::mime_type_for(e.name)))},
            {"modified", kernels::iso8601(std::chrono::system_clock::time_point(
                             std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                 std::chrono::nanoseconds(e.mtime_ns))))},
            {"url", files_url(session_id) + url_encode_path(e.path)}};
}

// After a complete upload body: the temporary file replaces the target.
void finish_upload(services& s, const request_ptr& req, const reply_fn& reply) {
    const auto k = kernel_or_404(s, req, req->param("id"));
    const auto path = contents_store::check_path(req->param("path"));
    const auto store = store_of(k);
    const auto temp = req->params["temp"];
    const auto info = guarded([&] {
        try {
            store->rename(temp, path, true);
        } catch (const contents_error&) {
            try {
                store->remove(temp);
            } catch (const contents_error&) {
            }
            throw;
        }
        return store->stat(path);
    });
    reply(json_response(req->params["created"] == "1" ? 201 : 200,
                        {{"path", info.path},
                         {"size", info.size},
                         {"mime_type", std::string(contents::mime_type_for(info.name))},
                         {"url", files_url(k->id()) + url_encode_path(info.path)}}));
}

// Sessions: create, list, look up, delete, interrupt, restart, execute.
void register_sessions(router& r, services& s, agent::agent_service& agents) {
    r.add(bhttp::verb::post, "/v1/sessions", [&s, &agents](const request_ptr& req, reply_fn reply) {
        const auto body = req->json_body();
        // A start from a snapshot another node took runs on that node, beside its files.
        if (const auto from = body.is_object() ? body.find("from_snapshot") : body.end();
            from != body.end() && from->is_string()) {
            reply_fn located = [reply](response res) {  // the other node's 201, with its Location
                if (const auto made = json::parse(res.body, nullptr, false); res.status == 201 && made.is_object() &&
                                                                             made.value("id", json()).is_string())
                    res.headers.emplace_back("Location", "/v1/sessions/" + made["id"].get<std::string>());
                reply(std::move(res));
            };
            if (relay_to_maker(s, req, from->get<std::string>(), located)) return;
        }
        start_agent_session(s, req->who.tenant, body,
                            [&s, reply](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                                if (e) return reply(failure_response(*e));
                                auto res = json_response(201, session_model(*k, s.kernels.specs().find(k->spec_name())));
                                res.headers.emplace_back("Location", "/v1/sessions/" + k->id());
                                reply(std::move(res));
                            });
    });
    r.add(bhttp::verb::get, "/v1/sessions", [&s](const request_ptr& req, reply_fn reply) {
        json list = json::array();
        for (const auto& k : s.kernels.list(req->who.tenant))
            list.push_back(session_model(*k, s.kernels.specs().find(k->spec_name())));
        reply_list(s, req, std::move(reply), {{"sessions", list}}, "sessions");
    });
    r.add(bhttp::verb::get, "/v1/sessions/{id}", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        reply(json_response(200, session_model(*k, s.kernels.specs().find(k->spec_name()))));
    });
    r.add(bhttp::verb::delete_, "/v1/sessions/{id}", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        s.sessions.remove_for_kernel(k->id());
        s.kernels.shutdown(k, [reply](std::optional<kernels::failure> e) {
            reply(e ? failure_response(*e) : empty_response(204));
        }, "session deleted");
    });

    r.add(bhttp::verb::post, "/v1/sessions/{id}/interrupt", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        s.kernels.interrupt(k, [reply](std::optional<kernels::failure> e) {
            reply(e ? failure_response(*e) : empty_response(204));
        });
    });
    r.add(bhttp::verb::post, "/v1/sessions/{id}/restart", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        s.kernels.restart(k, [&s, k, reply](std::optional<kernels::failure> e) {
            reply(e ? failure_response(*e)
                    : json_response(200, session_model(*k, s.kernels.specs().find(k->spec_name()))));
        });
    });
    // Pause and resume: 200 with the session's model once done.
    r.add(bhttp::verb::post, "/v1/sessions/{id}/pause", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        s.kernels.pause(k, [&s, k, reply](std::optional<kernels::failure> e) {
            reply(e ? failure_response(*e)
                    : json_response(200, session_model(*k, s.kernels.specs().find(k->spec_name()))));
        });
    });
    r.add(bhttp::verb::post, "/v1/sessions/{id}/resume", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        s.kernels.resume(k, [&s, k, reply](std::optional<kernels::failure> e) {
            reply(e ? failure_response(*e)
                    : json_response(200, session_model(*k, s.kernels.specs().find(k->spec_name()))));
        });
    });
    r.add(bhttp::verb::post, "/v1/sessions/{id}/execute", [&s](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto body = req->json_body(false);
        if (const auto no = s.cells->ready(k)) {
            auto res = failure_response(no->why);
            if (no->retry_after) res.headers.emplace_back("Retry-After", std::to_string(no->retry_after->count()));
            return reply(std::move(res));
        }
        run_and_reply(*s.cells, k, s.cells->options(*k, v1_cell(body, k->id())), req, std::move(reply));
    });
}

// Files: each handler runs on the file-I/O pool (see run_file_work).
using file_handler = std::function<void(const request_ptr&, const reply_fn&)>;
handler_fn on_pool(services& s, file_handler h) {
    return [&s, h = std::move(h)](const request_ptr& req, reply_fn reply) {
        run_file_work(s, req, std::move(reply), [h, req](const reply_fn& rep) { h(req, rep); });
    };
}

// The ledger: a session's executions, paged oldest first, and one by id.
void register_ledger(router& r, services& s, agent::agent_service& agents) {
    r.add(bhttp::verb::get, "/v1/sessions/{id}/executions", [&s, &agents](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto limit = query_number(req, "limit", 100, 1000);
        if (limit == 0) throw api_exception(400, "'limit' must be at least 1");
        const auto page = agents.ledger().list(k->id(), query_number(req, "after", 0, UINT64_MAX), limit);
        json body = {{"executions", page.records}, {"next_after", page.next_after ? json(*page.next_after) : json(nullptr)}};
        reply(json_response(200, body));
    });
    r.add(bhttp::verb::get, "/v1/sessions/{id}/executions/{execution_id}", [&s, &agents](const request_ptr& req, reply_fn reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto rec = agents.ledger().find(k->id(), req->param("execution_id"));
        if (!rec) throw api_exception(404, "No execution '" + req->param("execution_id").substr(0, 64) + "' in this session");
        reply(json_response(200, *rec));
    });
    // A budgeted execution's whole stdout or stderr, paged by byte offset.
    r.add(bhttp::verb::get, "/v1/sessions/{id}/executions/{execution_id}/output",
          on_pool(s, [&s, &agents](const request_ptr& req, const reply_fn& reply) {
              const auto k = kernel_or_404(s, req, req->param("id"));
              const auto& eid = req->param("execution_id");
              const auto stream = req->query_value("stream").value_or("stdout");
              if (stream != "stdout" && stream != "stderr") throw api_exception(400, "'stream' must be stdout or stderr");
              const auto offset = query_number(req, "offset", 0, UINT64_MAX);
              const auto limit = std::max<std::uint64_t>(query_number(req, "limit", 64u << 10, 1u << 20), 1);
              const auto rec = agents.ledger().find(k->id(), eid);
              const auto dir = agents.spool_dir(k->id());
              if (!rec || dir.empty() || eid.find('/') != std::string::npos)
                  throw api_exception(404, "No execution '" + eid.substr(0, 64) + "' with a kept output in this session");
              const int fd = ::open((dir / (eid + "." + stream)).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
              if (fd < 0)
                  throw api_exception(404, "Execution '" + eid.substr(0, 64) + "' kept no output: only executions with "
                                           "max_output_tokens or max_output_bytes keep theirs");
              struct stat st{};
              ::fstat(fd, &st);
              const auto total = static_cast<std::uint64_t>(st.st_size);
              std::string data(static_cast<std::size_t>(offset >= total ? 0 : std::min(limit, total - offset)), '\0');
              std::size_t got = 0;
              while (got < data.size()) {
                  const auto n = ::pread(fd, data.data() + got, data.size() - got, static_cast<off_t>(offset + got));
                  if (n <= 0) break;
                  got += static_cast<std::size_t>(n);
              }
              ::close(fd);
              data.resize(got);
              // Whole UTF-8 sequences: a cut one waits for the next page.
              if (offset + got < total) data.resize(utf8_complete_length(data));
              const auto next = offset + data.size();
              reply(json_response(200, {{"execution_id", eid},
                                        {"stream", stream},
                                        {"offset", offset},
                                        {"bytes", data.size()},
                                        {"total_bytes", total},
                                        {"next_offset", next < total ? json(next) : json(nullptr)},
                                        {"data", std::move(data)}}));
          }));
    // The original of an image the budget scaled down.
    r.add(bhttp::verb::get, "/v1/sessions/{id}/executions/{execution_id}/images/{n}",
          on_pool(s, [&s, &agents](const request_ptr& req, const reply_fn& reply) {
              const auto k = kernel_or_404(s, req, req->param("id"));
              const auto& eid = req->param("execution_id");
              const auto& n = req->param("n");
              const auto dir = agents.spool_dir(k->id());
              if (!agents.ledger().find(k->id(), eid) || dir.empty() || n.empty() || n.size() > 4 ||
                  n.find_first_not_of("0123456789") != std::string::npos)
                  throw api_exception(404, "No such image");
              for (const auto& [ext, mime] : {std::pair{".png", "image/png"}, std::pair{".jpg", "image/jpeg"}}) {
                  const int fd = ::open((dir / (eid + ".image-" + n + ext)).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                  if (fd < 0) continue;
                  struct stat st{};
                  ::fstat(fd, &st);
                  response res;
                  res.content_type = mime;
                  res.file_fd = fd;
                  res.file_size = static_cast<std::uint64_t>(st.st_size);
                  return reply(std::move(res));
              }
              throw api_exception(404, "No such image");
          }));
}

// The workspace listing, and uploads as multipart forms.
void register_file_listing(router& r, services& s) {
    r.add(bhttp::verb::get, "/v1/sessions/{id}/files", on_pool(s, [&s](const request_ptr& req, const reply_fn& reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto store = store_of(k);
        const auto dir = req->query_value("path").value_or("");
        k->touch();
        const auto listed = guarded([&] { return store->list(contents_store::check_path(dir), s.max_listed_entries); });
        json list = json::array();
        for (const auto& e : listed.entries) list.push_back(file_entry(k->id(), e));
        auto res = json_response(200, {{"path", dir}, {"entries", list}, {"truncated", listed.truncated}});
        if (listed.truncated) res.headers.emplace_back("X-Cellgate-Truncated", std::to_string(s.max_listed_entries));
        reply(std::move(res));
    }));
    r.add(bhttp::verb::post, "/v1/sessions/{id}/files", on_pool(s, [&s](const request_ptr& req, const reply_fn& reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto ct = req->req[bhttp::field::content_type];
        const auto boundary = multipart_boundary(std::string_view(ct.data(), ct.size()));
        if (!boundary) throw api_exception(415, "Expected multipart/form-data with a boundary");
        const auto parts = parse_multipart(req->req.body(), *boundary);
        if (!parts) throw api_exception(400, "The multipart body is malformed");
        const auto dir = form_directory(*parts);
        const auto store = store_of(k);
        k->touch();
        json saved = json::array();
        for (const auto& p : *parts) {
            if (!p.filename) continue;
            const auto path = form_file_path(p, dir);
            if (p.data.size() > k->policy().upload_limit_bytes) throw api_exception(413, "A file is larger than the upload limit");
            const auto info = guarded([&] {
                store->make_parents(path);
                return store->write(path, p.data);
            });
            saved.push_back(file_entry(k->id(), info));
        }
        if (saved.empty()) throw api_exception(400, "No file parts in the form");
        reply(json_response(201, {{"files", saved}}));
    }));
}

// One file by path: upload (streamed to a temporary file), download, delete.
void register_file_paths(router& r, services& s) {
    r.add_upload(bhttp::verb::put, "/v1/sessions/{id}/files/{path*}",
                 {[&s](const request_ptr& req) {
                      const auto k = kernel_or_404(s, req, req->param("id"));
                      auto store = store_of(k);
                      const auto path = guarded([&] { return contents_store::check_path(req->param("path")); });
                      if (path.empty()) throw api_exception(400, "A file path is required");
                      k->touch();
                      // The body goes to a temporary file renamed over the old one only
                      // once complete: a dropped upload leaves the previous file intact.
                      std::string temp;
                      const int fd = guarded([&] {
                          store->make_parents(path);
                          req->params["created"] = store->exists(path) ? "0" : "1";
                          return store->open_temp_beside(path, temp);
                      });
                      req->params["temp"] = temp;
                      upload_target t;
                      t.fd = fd;
                      t.max_bytes = k->policy().upload_limit_bytes;
                      t.discard = [k, temp] {
                          try {
                              store_of(k)->remove(temp);
                          } catch (...) {
                          }
                      };
                      return t;
                  },
                  [&s](const request_ptr& req, std::uint64_t, reply_fn reply) {
                      run_file_work(s, req, std::move(reply), [&s, req](const reply_fn& rep) { finish_upload(s, req, rep); });
                  }});
    r.add(bhttp::verb::get, "/v1/sessions/{id}/files/{path*}", on_pool(s, [&s](const request_ptr& req, const reply_fn& reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto store = store_of(k);
        const auto path = guarded([&] { return contents_store::check_path(req->param("path")); });
        k->touch();
        std::uint64_t size = 0;
        const int fd = guarded([&] { return store->open_for_read(path, size); });
        response res;
        const auto name = std::filesystem::path(path).filename().string();
        res.content_type = std::string(contents::mime_type_for(name));
        res.file_fd = fd;
        res.file_size = size;
        res.headers.emplace_back("Content-Security-Policy", "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'");
        if (req->query.count("download") != 0 && req->query_value("download") != "0")
            res.headers.emplace_back("Content-Disposition", attachment_disposition(name));
        reply(std::move(res));
    }));
    r.add(bhttp::verb::delete_, "/v1/sessions/{id}/files/{path*}", on_pool(s, [&s](const request_ptr& req, const reply_fn& reply) {
        const auto k = kernel_or_404(s, req, req->param("id"));
        const auto path = guarded([&] { return contents_store::check_path(req->param("path")); });
        if (path.empty()) throw api_exception(400, "Delete the session to remove its whole workspace");
        k->touch();
        guarded([&] {
            store_of(k)->remove(path, true);
            return 0;
        });
        reply(empty_response(204));
    }));
}

// A one-shot program in another language (core/runs.hpp): its stages as
// Piston reports them, and its record.
json stage_model(const core::stage_result& st) {
    return {{"stdout", valid_utf8(st.stdout_)},
            {"stderr", valid_utf8(st.stderr_)},
            {"exit_code", st.code ? json(*st.code) : json(nullptr)},
            {"signal", st.signal.empty() ? json(nullptr) : json(st.signal)},
            {"status", st.status.empty() ? json(nullptr) : json(st.status)},
            {"message", st.message.empty() ? json(nullptr) : json(st.message)},
            {"cpu_ms", st.cpu_ms},
            {"wall_ms", st.wall_ms},
            {"peak_memory_bytes", st.memory}};
}

class language_run : public core::run_observer {
public:
    language_run(reply_fn reply, core::runtime rt, std::string code)
        : reply_(std::move(reply)), rt_(std::move(rt)), code_(std::move(code)), started_(std::chrono::system_clock::now()) {}
    void done(core::run_result r) override {
        const auto ended = std::chrono::system_clock::now();
        json out = {{"language", rt_.language}, {"version", rt_.version}};
        out["compile"] = r.compile ? stage_model(*r.compile) : json(nullptr);
        out["run"] = r.run ? stage_model(*r.run) : json(nullptr);
        const auto* last = r.run ? &*r.run : &*r.compile;
        out["status"] = !r.run                  ? "compile_error"
                        : last->status == "TO" ? "timeout"
                        : last->status.empty() ? "ok"
                                               : "error";
        std::int64_t cpu = 0, wall = 0;
        std::uint64_t peak = 0;
        for (const auto* st : {r.compile ? &*r.compile : nullptr, r.run ? &*r.run : nullptr})
            if (st) cpu += st->cpu_ms, wall += st->wall_ms, peak = std::max(peak, st->memory);
        out["usage"] = {{"execution_id", protocol::make_uuid()},
                        {"surface", "v1"},
                        {"language", rt_.language},
                        {"version", rt_.version},
                        {"code_bytes", code_.size()},
                        {"code_sha256", sha256_hex(code_)},
                        {"started_at", kernels::iso8601(started_)},
                        {"ended_at", kernels::iso8601(ended)},
                        {"cpu_s", static_cast<double>(cpu) / 1000},
                        {"wall_s", static_cast<double>(wall) / 1000},
                        {"peak_memory_bytes", peak},
                        {"exit_code", last->code ? json(*last->code) : json(nullptr)}};
        reply_(json_response(200, out));
    }
    void failed(unsigned status, std::string message, std::optional<std::chrono::seconds> retry_after) override {
        reply_(kit::refusal(status, message, retry_after));
    }

private:
    reply_fn reply_;
    core::runtime rt_;
    std::string code_;
    std::chrono::system_clock::time_point started_;
};

// Whether a /v1/execute body asks for a one-shot program rather than a
// Python cell: a language other than Python's, or Python with a version,
// stdin or args (which a cell has no place for).
bool wants_program(const json& body) {
    const auto it = body.find("language");
    if (it == body.end() || it->is_null()) return false;
    if (!it->is_string()) throw api_exception(400, "'language' must be a string");
    const auto language = it->get<std::string>();
    const bool python = language == "python" || language == "python3" || language == "py";
    return !python || body.contains("version") || body.contains("stdin") || body.contains("args");
}

void run_program(services& s, const request_ptr& req, const json& body, reply_fn reply) {
    if (!s.runs || !s.runtimes) throw api_exception(404, "No one-shot runtimes here (the languages image is not built)");
    const auto language = body["language"].get<std::string>();
    const auto version = string_field(body, "version", "*");
    auto rt = s.runtimes->find(req->who.tenant, language, version);
    if (!rt) throw api_exception(400, "No runtime " + language.substr(0, 64) + " " + version.substr(0, 32) +
                                          " here; GET /api/v2/runtimes lists them");
    const auto code = body.find("code");
    if (code == body.end() || !code->is_string()) throw api_exception(400, "'code' must be a string");
    core::run_request r;
    r.tenant = req->who.tenant;
    r.rt = *rt;
    r.files.push_back({"main.code", code->get<std::string>()});
    for (auto& [path, data] : inline_files_from(body)) r.files.push_back({path, std::move(data)});
    r.stdin_data = string_field(body, "stdin");
    if (const auto a = body.find("args"); a != body.end() && !a->is_null()) {
        if (!a->is_array()) throw api_exception(400, "'args' must be an array of strings");
        for (const auto& x : *a) {
            if (!x.is_string()) throw api_exception(400, "'args' must be an array of strings");
            r.args.push_back(x.get<std::string>());
        }
    }
    // One program's time: timeout_s (30 s unless asked), held to ten minutes;
    // its compile gets a minute more. Each stream keeps 1 MiB.
    const auto asked = asked_seconds(body, "timeout_s").value_or(std::chrono::seconds(30));
    const auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(std::min(asked, std::chrono::seconds(600)));
    r.run = {wall, wall, -1, 1u << 20};
    r.compile = {wall + std::chrono::seconds(60), wall + std::chrono::seconds(60), -1, 1u << 20};
    r.env = strict_env(body);
    s.runs->start(std::move(r), std::make_shared<language_run>(std::move(reply), std::move(*rt), code->get<std::string>()));
}

void register_one_shot(router& r, services& s) {
    // One-shot: a fresh sandbox, the files, the code, the result with every
    // produced file inline, and the sandbox gone again. With a `language`,
    // a program of that language's runtime (compile, then run with stdin and
    // args) in place of a Python cell.
    r.add(bhttp::verb::post, "/v1/execute", [&s](const request_ptr& req, reply_fn reply) {
        const auto body = req->json_body(false);
        if (wants_program(body)) return run_program(s, req, body, std::move(reply));
        // The cell is checked before a sandbox starts for it.
        auto cell = cell_request_from(body);
        cell.inline_files = true;  // the sandbox is gone after: the files come inline, unlinked
        cell.keep_output = false;  // and so is any output to read back
        auto files = inline_files_from(body);
        auto ask = core::session_for(req->who.tenant);
        ask.env = strict_env(body);
        ask.limits = limits_asked_from(body);
        ask.limits.idle_timeout = std::chrono::seconds(0);  // it ends with the call
        s.core->start(
            ask,
            [&s, req, cell = std::move(cell), files = std::move(files), reply](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                if (e) return reply(failure_response(*e));
                auto finish = [&s, k](std::function<void()> then) {
                    s.kernels.shutdown(k, [then](std::optional<kernels::failure>) { then(); }, "one-shot execution finished");
                };
                // The files are written on the file-I/O pool; an error there ends the sandbox too.
                reply_fn finish_with = [finish, reply](response res) {
                    finish([reply, res = std::move(res)]() mutable { reply(std::move(res)); });
                };
                run_file_work(s, req, finish_with, [&s, k, cell, files, finish, reply](const reply_fn&) {
                    const auto store = store_of(k);
                    for (const auto& [path, data] : files) guarded([&] {
                            store->make_parents(path);
                            return store->write(path, data);
                        });
                    s.cells->run(k, s.cells->options(*k, cell), {}, [reply, finish, id = k->id()](json result) {
                        link_result(result, id, false);
                        finish([reply, result] { reply(json_response(200, result)); });
                    });
                });
            });
    });
}

}  // namespace

void register_agent_api(router& r, services& s, agent::agent_service& agents) {
    register_sessions(r, s, agents);
    register_ledger(r, s, agents);
    register_file_listing(r, s);
    register_file_paths(r, s);
    register_one_shot(r, s);
    register_snapshots(r, s, agents);
    register_workspace_api(r, s, agents);
    register_volumes(r, s);
}

}  // namespace cellgate::v1
