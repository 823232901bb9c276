#include "cellgate/launcher/service.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cellgate::launcher::service {

namespace {

using json = nlohmann::json;

struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

client::client(std::filesystem::path socket) : socket_(std::move(socket)) {
    sockaddr_un addr{};
    if (socket_.native().size() >= sizeof addr.sun_path)
        throw std::invalid_argument("launcher socket path too long: " + socket_.string());
}

json client::call(const request& r) const {
    fd_guard s{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (s.fd < 0) throw launch_error("launcher-service", "socket: " + std::string(std::strerror(errno)), errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket_.c_str(), socket_.native().size());
    if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
        throw launch_error("launcher-service",
                           "cannot reach the launcher service at " + socket_.string() + ": " + std::strerror(errno), errno);
    const std::string line = to_json(r).dump() + "\n";
    for (std::size_t done = 0; done < line.size();) {
        const auto n = ::send(s.fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw launch_error("launcher-service", "sending the request failed", errno);
        done += static_cast<std::size_t>(n);
    }
    ::shutdown(s.fd, SHUT_WR);
    std::string reply;
    char buf[65536];
    for (;;) {
        const auto n = ::recv(s.fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw launch_error("launcher-service", "reading the reply failed", errno);
        if (n == 0) break;
        reply.append(buf, static_cast<std::size_t>(n));
        if (reply.size() > max_reply_bytes) throw launch_error("launcher-service", "reply too large");
    }
    const auto j = json::parse(reply, nullptr, false);
    if (!j.is_object() || !j.contains("ok")) throw launch_error("launcher-service", "malformed reply");
    if (j["ok"] == true) return j.value("result", json(nullptr));
    const auto& e = j.at("error");
    const auto kind = e.value("kind", "");
    const auto message = e.value("message", "launcher service error");
    if (kind == "spec" || kind == "request") throw spec_error(message);
    throw launch_error(e.value("step", "launcher-service"), message, e.value("errno", 0));
}

sandbox_info client::launch(const sandbox_spec& spec) {
    request r;
    r.op = op::create;
    r.spec = spec;
    return sandbox_info_from_json(call(r));
}

void client::signal(const std::string& id, int signal) {
    request r;
    r.op = op::signal;
    r.id = id;
    r.signal = signal;
    call(r);
}

sandbox_status client::status(const std::string& id) {
    request r;
    r.op = op::status;
    r.id = id;
    return status_from_json(call(r));
}

void client::set_cpu_shares(const std::string& id, std::uint32_t shares) {
    request r;
    r.op = op::set_cpu_shares;
    r.id = id;
    r.shares = shares;
    call(r);
}

std::vector<sandbox_status> client::list() {
    request r;
    r.op = op::list;
    std::vector<sandbox_status> out;
    for (const auto& s : call(r)) out.push_back(status_from_json(s));
    return out;
}

void client::remove(const std::string& id, remove_options options) {
    request r;
    r.op = op::remove;
    r.id = id;
    r.keep_workspace = options.keep_workspace;
    call(r);
}

std::vector<std::string> client::reap_orphans(const std::set<std::string>& keep, bool unused_workspaces) {
    request r;
    r.op = op::reap;
    r.keep = keep;
    r.unused_workspaces = unused_workspaces;
    return call(r).get<std::vector<std::string>>();
}

void client::validate(const sandbox_spec& spec) const {
    request r;
    r.op = op::validate;
    r.spec = spec;
    call(r);
}

}  // namespace cellgate::launcher::service
