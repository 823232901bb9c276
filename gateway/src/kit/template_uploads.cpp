#include "kit/template_uploads.hpp"

#include "templates/template_store.hpp"
#include "util/api_error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

namespace cellgate::kit {

using namespace http;

namespace {

templates::template_store& store_of(services& s) {
    if (!s.templates) throw api_exception(404, "This gateway builds no templates");
    return *s.templates;
}

}  // namespace

upload_handler template_files_upload(
    services& s, std::function<std::string(const request_ptr&)> key_of,
    std::function<void(const request_ptr&, const templates::file_archive&, const reply_fn&)> done) {
    return upload_handler{
        [&s, key_of](const request_ptr& req) {
            auto& store = store_of(s);
            const auto key = key_of(req);
            if (!templates::file_store::valid_key(key)) throw api_exception(400, "A files key is 8 to 128 of [A-Za-z0-9_-]");
            auto room = store.files_room(req->who.tenant);
            if (room == 0)
                throw api_exception(413, "This tenant's template storage is full; delete a template first");
            // The tenant's share of the disk being written at once (as other
            // uploads): a quarter of it per archive, so the SDK's uploads of a
            // template's several copy() steps at once all fit.
            if (s.staging) {
                room = std::min(room, s.staging->per_tenant() / 4);
                req->holds = s.staging->reserve(req->who.tenant, room);
                if (!req->holds)
                    throw api_exception(429, "Your uploads being received already take " +
                                                 std::to_string(s.staging->per_tenant() >> 20) +
                                                 " MiB of staging space (the most a tenant may); wait for one to finish");
            }
            const int fd = store.files().begin(req->who.tenant);
            const int keep = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
            if (keep < 0) {
                ::close(fd);
                throw api_exception(500, "cannot keep the upload's file");
            }
            req->params["files_fd"] = std::to_string(keep);
            req->params["files_key"] = key;
            upload_target t;
            t.fd = fd;
            t.max_bytes = room;
            t.discard = [keep] { ::close(keep); };
            return t;
        },
        [&s, done](const request_ptr& req, std::uint64_t, reply_fn reply) {
            struct closer {
                explicit closer(int f) : fd(f) {}
                closer(const closer&) = delete;
                closer& operator=(const closer&) = delete;
                ~closer() { ::close(fd); }
                int fd;
            };
            auto kept = std::make_shared<closer>(std::stoi(req->params["files_fd"]));
            run_file_work(s, req, std::move(reply), [&s, done, req, kept](const reply_fn& rep) {
                auto& store = store_of(s);
                const auto room = store.files_room(req->who.tenant);
                const auto archive = store.files().commit(req->who.tenant, req->params["files_key"], kept->fd, room);
                done(req, archive, rep);
            });
        }};
}

}  // namespace cellgate::kit
