#include "jupyter/jupyter_api.hpp"
#include "util/api_error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cellgate::jupyter {

using namespace kit;

using namespace http;

namespace {

response created(const nlohmann::json& model) {
    auto r = json_response(201, model);
    r.headers.emplace_back("Location", "/api/kernels/" + model.at("id").get<std::string>());
    return r;
}

// Maps the manager's errors onto replies.
template <class Fn>
kernels::kernel_manager::done on_done(reply_fn reply, Fn success) {
    return [reply = std::move(reply), success = std::move(success)](std::optional<kernels::failure> e) {
        if (e) reply(failure_response(*e));
        else reply(success());
    };
}

}  // namespace

void register_kernels_api(router& r, services& s) {
    r.add(bhttp::verb::get, "/api/kernelspecs", [&s](const request_ptr& req, reply_fn reply) {
        reply(json_response(200, s.kernels.specs().models(req->who.tenant)));
    });
    r.add(bhttp::verb::get, "/api/kernelspecs/{name}", [&s](const request_ptr& req, reply_fn reply) {
        const auto* k = s.kernels.specs().find_for(req->param("name"), req->who.tenant);
        if (k == nullptr) throw api_exception(404, "No such kernel spec: " + req->param("name").substr(0, 64));
        reply(json_response(200, s.kernels.specs().model(*k)));
    });
    r.add(bhttp::verb::get, "/kernelspecs/{name}/{file}", [&s](const request_ptr& req, reply_fn reply) {
        const auto* k = s.kernels.specs().find_for(req->param("name"), req->who.tenant);
        if (k == nullptr) throw api_exception(404, "No such kernel spec");
        const auto it = k->resources.find(req->param("file"));
        if (it == k->resources.end()) throw api_exception(404, "No such kernel spec resource");
        const int fd = ::open(it->second.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        struct stat st{};
        if (fd < 0 || ::fstat(fd, &st) != 0) {
            if (fd >= 0) ::close(fd);
            throw api_exception(404, "No such kernel spec resource");
        }
        response res;
        res.content_type = it->first.ends_with(".svg") ? "image/svg+xml" : "image/png";
        res.file_fd = fd;
        res.file_size = static_cast<std::uint64_t>(st.st_size);
        reply(std::move(res));
    });

    r.add(bhttp::verb::get, "/api/kernels", [&s](const request_ptr& req, reply_fn reply) {
        auto list = nlohmann::json::array();
        for (const auto& k : s.kernels.list(req->who.tenant)) list.push_back(k->model());
        reply_list(s, req, std::move(reply), std::move(list));
    });
    r.add(bhttp::verb::post, "/api/kernels", [&s](const request_ptr& req, reply_fn reply) {
        const auto body = req->json_body();
        auto ask = core::session_for(req->who.tenant, kernels::surface::jupyter);
        ask.kernelspec = kernel_name_from(body);
        ask.env = kernel_env_from(body);
        s.core->start(ask,
                      [reply](std::optional<kernels::failure> e, kernels::kernel_ptr k) {
                          if (e) reply(failure_response(*e));
                          else reply(created(k->model()));
                      });
    });
    r.add(bhttp::verb::get, "/api/kernels/{kernel_id}", [&s](const request_ptr& req, reply_fn reply) {
        reply(json_response(200, kernel_or_404(s, req, req->param("kernel_id"))->model()));
    });
    r.add(bhttp::verb::delete_, "/api/kernels/{kernel_id}", [&s](const request_ptr& req, reply_fn reply) {
        auto k = kernel_or_404(s, req, req->param("kernel_id"));
        s.sessions.remove_for_kernel(k->id());
        s.kernels.shutdown(k, on_done(std::move(reply), [] { return empty_response(204); }));
    });
    r.add(bhttp::verb::post, "/api/kernels/{kernel_id}/interrupt", [&s](const request_ptr& req, reply_fn reply) {
        auto k = kernel_or_404(s, req, req->param("kernel_id"));
        s.kernels.interrupt(k, on_done(std::move(reply), [] { return empty_response(204); }));
    });
    r.add(bhttp::verb::post, "/api/kernels/{kernel_id}/restart", [&s](const request_ptr& req, reply_fn reply) {
        auto k = kernel_or_404(s, req, req->param("kernel_id"));
        s.kernels.restart(k, on_done(std::move(reply), [k] { return json_response(200, k->model()); }));
    });
    // A plain GET on the channels URL (no upgrade header) is a client error.
    r.add(bhttp::verb::get, "/api/kernels/{kernel_id}/channels", [](const request_ptr&, reply_fn reply) {
        reply(error_response(400, "This endpoint takes a WebSocket upgrade"));
    });
}

}  // namespace cellgate::jupyter
