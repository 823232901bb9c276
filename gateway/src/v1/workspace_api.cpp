// A session's workspace as a tar archive: out (GET …/workspace), in (PUT
// …/workspace), and in at create (POST /v1/sessions with a tar body, or a
// form with the session request and the archive). See docs/agent-api.md
// "Workspace export and import".
#include "agent/agent_service.hpp"
#include "v1/v1_api.hpp"
#include "contents/beneath.hpp"
#include "contents/contents_store.hpp"
#include "contents/workspace_export.hpp"
#include "contents/workspace_import.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"
#include "util/multipart.hpp"

#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

namespace cellgate::v1 {

using namespace kit;

using namespace http;
using nlohmann::json;
using contents::contents_error;
using contents::contents_store;

namespace {

// An unnamed temporary file (gone with its last descriptor) under $TMPDIR.
contents::beneath::unique_fd temp_archive() {
    const char* tmp = std::getenv("TMPDIR");
    const int fd = ::open(tmp && *tmp ? tmp : "/var/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw api_exception(500, "cannot make a temporary file for the archive");
    return contents::beneath::unique_fd(fd);
}

}  // namespace

// An archive's body streamed to a temporary file, within `max_bytes`: the
// server writes (and closes) one descriptor, the finish step reads a copy
// kept in params["archive_fd"].
upload_target staged_upload(services& s, const request_ptr& req, std::uint64_t max_bytes) {
    // The tenant's share of the staging disk, held until the request is done.
    if (s.staging) {
        req->holds = s.staging->reserve(req->who.tenant, max_bytes);
        if (!req->holds)
            throw api_exception(429, "Your uploads being received already take " +
                                         std::to_string(s.staging->per_tenant() >> 20) +
                                         " MiB of staging space (the most a tenant may); wait for one to finish");
    }
    auto fd = temp_archive();
    const int keep = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
    if (keep < 0) throw api_exception(500, "cannot keep the archive's temporary file");
    req->params["archive_fd"] = std::to_string(keep);
    upload_target t;
    t.fd = fd.release();
    t.max_bytes = max_bytes;
    t.discard = [keep] { ::close(keep); };
    return t;
}

std::shared_ptr<contents::beneath::unique_fd> kept_upload(const request_ptr& req) {
    return std::make_shared<contents::beneath::unique_fd>(std::stoi(req->params["archive_fd"]));
}

namespace {

constexpr std::uint64_t max_archive_entries = 100000;
constexpr std::size_t max_session_field_bytes = 64u << 10;  // a session create's JSON, as a form field

json import_model(const contents::import_result& done) {
    json skipped = json::array();
    for (const auto& sk : done.skipped) skipped.push_back({{"path", sk.path}, {"why", sk.why}});
    return {{"files", done.files},
            {"directories", done.directories},
            {"bytes", done.bytes},
            {"skipped", skipped},
            {"skipped_count", done.skipped_count}};
}

// Where the archive lies in the uploaded file, and the session request that
// came with it. A tar body is all archive, with the default request; a form
// has an optional "session" field (the JSON of POST /v1/sessions) and a
// "workspace" part (the archive).
struct create_upload {
    json session = json::object();
    std::uint64_t offset = 0, size = 0;
};

create_upload read_create_upload(const request_ptr& req, int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw api_exception(500, "cannot read the upload back");
    create_upload out;
    out.size = static_cast<std::uint64_t>(st.st_size);
    const auto ct = req->req[bhttp::field::content_type];
    const auto boundary = multipart_boundary(std::string_view(ct.data(), ct.size()));
    if (!boundary) {
        if (std::string_view(ct.data(), ct.size()).starts_with("multipart/"))
            throw api_exception(400, "A multipart/form-data body needs a boundary in its Content-Type");
        return out;  // application/x-tar
    }
    if (out.size == 0) throw api_exception(400, "The form is empty: send a 'workspace' part holding a tar archive");
    void* map = ::mmap(nullptr, out.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) throw api_exception(500, "cannot map the upload");
    const auto unmap = [&] { ::munmap(map, out.size); };
    const std::string_view body(static_cast<const char*>(map), out.size);
    const auto parts = parse_multipart(body, *boundary, 16);
    if (!parts) {
        unmap();
        throw api_exception(400, "The multipart body is malformed");
    }
    bool have_archive = false, have_session = false;
    std::string problem;
    for (const auto& p : *parts) {
        if (p.name == "workspace") {
            if (have_archive) problem = "Send one 'workspace' part";
            have_archive = true;
            out.offset = static_cast<std::uint64_t>(p.data.data() - body.data());
            out.size = p.data.size();
        } else if (p.name == "session") {
            if (have_session) problem = "Send one 'session' field";
            have_session = true;
            if (p.data.size() > max_session_field_bytes)
                problem = "The 'session' field is over " + std::to_string(max_session_field_bytes >> 10) + " KiB";
            else if (!json_nesting_within(p.data, max_body_json_depth))
                problem = "The 'session' field nests deeper than " + std::to_string(max_body_json_depth) + " levels";
            else out.session = json::parse(p.data, nullptr, false);
            if (problem.empty() && !out.session.is_object())
                problem = "The 'session' field must hold a JSON object (the body of POST /v1/sessions)";
        } else if (problem.empty()) {
            problem = "Unknown form field '" + p.name.substr(0, 64) + "' (a session create takes 'session' and 'workspace')";
        }
    }
    unmap();
    if (problem.empty() && !have_archive) problem = "The form has no 'workspace' part (a tar archive)";
    if (!problem.empty()) throw api_exception(400, problem);
    return out;
}

void register_export_import(router& r, services& s) {
    // The workspace (or ?path= one directory of it) as a tar archive, for
    // backups and for moving work between gateways. Built in an unnamed
    // temporary file and streamed from there: its file data is at most the
    // workspace's cap (hard links are link entries; a sparse file counts at
    // its full length), so the temporary file is too.
    r.add(bhttp::verb::get, "/v1/sessions/{id}/workspace", [&s](const request_ptr& req, reply_fn reply) {
        run_file_work(s, req, std::move(reply), [&s, req](const reply_fn& rep) {
            const auto k = kernel_or_404(s, req, req->param("id"));
            const auto store = open_files(k);
            const auto root = guarded([&] { return contents_store::check_path(req->query_value("path").value_or("")); });
            k->touch();
            auto fd = temp_archive();
            const auto* spec = s.kernels.specs().find(k->spec_name());
            const auto cap = spec != nullptr ? spec->limits.workspace_bytes : std::uint64_t{1} << 30;
            const auto done = guarded([&] { return contents::export_tar(*store, root, fd.get(), max_archive_entries, cap); });
            ::lseek(fd.get(), 0, SEEK_SET);
            response res;
            res.content_type = "application/x-tar";
            res.file_fd = fd.release();
            res.file_size = done.bytes;
            const auto base = root.empty() ? std::string("workspace") : std::filesystem::path(root).filename().string();
            res.headers.emplace_back("Content-Disposition", attachment_disposition(base + ".tar"));
            res.headers.emplace_back("X-Cellgate-Entries", std::to_string(done.entries));
            res.headers.emplace_back("X-Cellgate-Skipped", std::to_string(done.skipped));
            res.headers.emplace_back("X-Cellgate-Links", std::to_string(done.links));
            rep(std::move(res));
        });
    });
    // A tar archive unpacked into the workspace (or ?path= a directory of
    // it): the body goes to an unnamed temporary file first (at most the
    // upload limit), so a dropped upload changes nothing.
    r.add_upload(bhttp::verb::put, "/v1/sessions/{id}/workspace",
                 {[&s](const request_ptr& req) {
                      const auto k = kernel_or_404(s, req, req->param("id"));
                      guarded([&] { return contents_store::check_path(req->query_value("path").value_or("")); });
                      k->touch();
                      return staged_upload(s, req, k->policy().upload_limit_bytes);
                  },
                  [&s](const request_ptr& req, std::uint64_t, reply_fn reply) {
                      auto archive = kept_upload(req);
                      run_file_work(s, req, std::move(reply), [&s, req, archive](const reply_fn& rep) {
                          const auto k = kernel_or_404(s, req, req->param("id"));
                          const auto store = open_files(k);
                          struct stat st {};
                          if (::fstat(archive->get(), &st) != 0) throw api_exception(500, "cannot read the archive back");
                          const auto root = req->query_value("path").value_or("");
                          const auto done = guarded([&] {
                              return contents::import_tar(*store, root, archive->get(), static_cast<std::uint64_t>(st.st_size),
                                                          max_archive_entries);
                          });
                          rep(json_response(200, import_model(done)));
                      });
                  }});
}

// POST /v1/sessions with application/x-tar or multipart/form-data: a new
// session whose workspace starts as the archive. The session starts, the
// archive is unpacked into its workspace, and only then does the client get
// 201 (the session model plus "imported"); an archive that cannot be
// unpacked (malformed, too many entries, past the workspace's size) ends the
// new session and answers the error: nothing is left half-made.
void register_create_from_archive(router& r, services& s, agent::agent_service& agents) {
    upload_handler u{
        [&s](const request_ptr& req) {
            // The body's cap: the tenant's upload limit under the default kernel's policy.
            const auto policy = s.kernels.config().policies.resolve(kernels::surface::agent, s.kernels.specs().default_name(),
                                                                   req->who.tenant);
            return staged_upload(s, req, policy.upload_limit_bytes);
        },
        [&s, &agents](const request_ptr& req, std::uint64_t, reply_fn reply) {
            auto archive = kept_upload(req);
            run_file_work(s, req, std::move(reply), [&s, &agents, req, archive](const reply_fn& rep) {
                const auto up = read_create_upload(req, archive->get());
                start_agent_session(
                    s, req->who.tenant, up.session,
                    [&s, req, archive, up, reply = rep](std::optional<kernels::failure> f, kernels::kernel_ptr k) {
                        if (f) return reply(failure_response(*f));
                        // The session ends unless its archive was unpacked (also
                        // when the file-I/O pool turns the import away).
                        auto imported_ok = std::make_shared<std::atomic<bool>>(false);
                        auto end_unless_imported = [&s, k, imported_ok, reply](response res) {
                            if (!imported_ok->load()) {
                                spdlog::info("v1: session {} ended: its workspace archive was not unpacked ({})", k->id(),
                                             res.status);
                                s.sessions.remove_for_kernel(k->id());
                                s.kernels.shutdown(k, [](std::optional<kernels::failure>) {},
                                                   "its workspace archive was refused at create");
                            }
                            reply(std::move(res));
                        };
                        run_file_work(s, req, end_unless_imported, [&s, archive, up, k, imported_ok](const reply_fn& done) {
                            const auto store = open_files(k, 503);
                            const auto imported = guarded([&] {
                                return contents::import_tar(*store, "", archive->get(), up.size, max_archive_entries, up.offset);
                            });
                            imported_ok->store(true);
                            auto model = session_model(*k, s.kernels.specs().find(k->spec_name()));
                            model["imported"] = import_model(imported);
                            auto res = json_response(201, model);
                            res.headers.emplace_back("Location", "/v1/sessions/" + k->id());
                            done(std::move(res));
                        });
                    });
            });
        },
        {"application/x-tar", "application/tar", "multipart/form-data"}};
    r.add_upload(bhttp::verb::post, "/v1/sessions", std::move(u));
}

}  // namespace

void register_workspace_api(router& r, services& s, agent::agent_service& agents) {
    register_export_import(r, s);
    register_create_from_archive(r, s, agents);
}

}  // namespace cellgate::v1
