#include "cellgate/launcher/service.hpp"

#include "exec_channel.hpp"
#include "exec_wire.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace cellgate::launcher::service {

namespace {

using json = nlohmann::json;

// An exec's reply is small; everything else about the process comes later.
constexpr std::size_t max_exec_reply_bytes = 64u << 10;
constexpr auto exec_reply_timeout = std::chrono::seconds(90);

void send_all(int fd, const std::string& line) {
    for (std::size_t done = 0; done < line.size();) {
        const auto n = ::send(fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw launch_error("launcher-service", "sending the request failed", errno);
        done += static_cast<std::size_t>(n);
    }
}

// The launcher's own exception for an error reply.
[[noreturn]] void throw_reply_error(const json& j) {
    const auto& e = j.at("error");
    const auto kind = e.value("kind", "");
    const auto message = e.value("message", "launcher service error");
    if (kind == "spec" || kind == "request") throw spec_error(message);
    throw launch_error(e.value("step", "launcher-service"), message, e.value("errno", 0));
}

// Reads the reply line and every descriptor that came with it; `rest` gets
// what followed the line (an exit line, when the process was quick).
std::string read_reply_with_fds(int fd, std::vector<unique_fd>& fds, std::string& rest) {
    std::string data;
    const auto deadline = std::chrono::steady_clock::now() + exec_reply_timeout;
    for (;;) {
        if (const auto nl = data.find('\n'); nl != std::string::npos) {
            rest = data.substr(nl + 1);
            data.resize(nl);
            return data;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd p{fd, POLLIN, 0};
        if (left.count() <= 0) throw launch_error("launcher-service", "no reply to exec in time", ETIMEDOUT);
        if (::poll(&p, 1, static_cast<int>(left.count())) < 0) {
            if (errno == EINTR) continue;
            throw launch_error("launcher-service", "poll", errno);
        }
        char buf[4096];
        iovec iov{buf, sizeof buf};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        const auto n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw launch_error("launcher-service", "reading the reply failed", errno);
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (std::size_t i = 0; i < count; ++i) {
                int got = -1;
                std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
                fds.emplace_back(got);
            }
        }
        if ((msg.msg_flags & MSG_CTRUNC) != 0) throw launch_error("launcher-service", "the reply carried too many descriptors");
        if (n == 0) throw launch_error("launcher-service", "the service closed the connection without a reply", EPIPE);
        data.append(buf, static_cast<std::size_t>(n));
        if (data.size() > max_exec_reply_bytes) throw launch_error("launcher-service", "reply too large");
    }
}

bool is_kind(int fd, mode_t kind) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

}  // namespace

client::client(std::filesystem::path socket) : socket_(std::move(socket)) {
    sockaddr_un addr{};
    if (socket_.native().size() >= sizeof addr.sun_path)
        throw std::invalid_argument("launcher socket path too long: " + socket_.string());
}

unique_fd client::connect() const {
    unique_fd s{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (!s) throw launch_error("launcher-service", "socket: " + std::string(std::strerror(errno)), errno);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket_.c_str(), socket_.native().size());
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
        throw launch_error("launcher-service",
                           "cannot reach the launcher service at " + socket_.string() + ": " + std::strerror(errno), errno);
    return s;
}

json client::call(const request& r) const {
    const auto s = connect();
    send_all(s.get(), to_json(r).dump() + "\n");
    ::shutdown(s.get(), SHUT_WR);
    std::string reply;
    char buf[65536];
    for (;;) {
        const auto n = ::recv(s.get(), buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw launch_error("launcher-service", "reading the reply failed", errno);
        if (n == 0) break;
        reply.append(buf, static_cast<std::size_t>(n));
        if (reply.size() > max_reply_bytes) throw launch_error("launcher-service", "reply too large");
    }
    const auto j = json::parse(reply, nullptr, false);
    if (!j.is_object() || !j.contains("ok")) throw launch_error("launcher-service", "malformed reply");
    if (j["ok"] == true) return j.value("result", json(nullptr));
    throw_reply_error(j);
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

sandbox_usage client::usage(const std::string& id, bool reset_peak) {
    request r;
    r.op = op::usage;
    r.id = id;
    r.reset_peak = reset_peak;
    return usage_from_json(call(r));
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

checkpoint_info client::checkpoint(const std::string& id) {
    request r;
    r.op = op::checkpoint;
    r.id = id;
    const auto j = call(r);
    checkpoint_info out;
    out.memory = j.at("memory").get<bool>();
    out.image_bytes = j.at("image_bytes").get<std::uint64_t>();
    out.ms = j.at("ms").get<double>();
    return out;
}

sandbox_info client::restore(const std::string& id) {
    request r;
    r.op = op::restore;
    r.id = id;
    return sandbox_info_from_json(call(r));
}

snapshot_info client::snapshot_workspace(const std::string& id, const std::string& snapshot) {
    request r;
    r.op = op::snapshot;
    r.id = id;
    r.snapshot = snapshot;
    const auto j = call(r);
    snapshot_info out;
    out.bytes = j.at("bytes").get<std::uint64_t>();
    out.disk_bytes = j.at("disk_bytes").get<std::uint64_t>();
    out.reflinked = j.at("reflinked").get<bool>();
    out.ms = j.at("ms").get<double>();
    return out;
}

void client::remove_snapshot(const std::string& snapshot) {
    request r;
    r.op = op::remove_snapshot;
    r.snapshot = snapshot;
    call(r);
}

void client::create_volume(const std::string& volume, std::uint64_t bytes) {
    request r;
    r.op = op::create_volume;
    r.volume = volume;
    r.bytes = bytes;
    call(r);
}

volume_info client::volume_usage(const std::string& volume) {
    request r;
    r.op = op::volume_usage;
    r.volume = volume;
    const auto j = call(r);
    return {j.at("bytes").get<std::uint64_t>(), j.at("used_bytes").get<std::uint64_t>()};
}

void client::remove_volume(const std::string& volume) {
    request r;
    r.op = op::remove_volume;
    r.volume = volume;
    call(r);
}

build_step_result client::run_build_step(const build_step_spec& spec) {
    request r;
    r.op = op::build_step;
    r.step = spec;
    return call(r).get<build_step_result>();
}

image_import_result client::import_image(const image_import_spec& spec) {
    request r;
    r.op = op::import_image;
    r.import = spec;
    return call(r).get<image_import_result>();
}

void client::remove_layer(const std::string& id) {
    request r;
    r.op = op::remove_layer;
    r.layer = id;
    call(r);
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

exec_process client::exec(const std::string& id, const exec_spec& spec) {
    request r;
    r.op = op::exec;
    r.id = id;
    r.process = spec;
    auto s = connect();
    send_all(s.get(), to_json(r).dump() + "\n");  // no SHUT_WR: the connection is the handle
    std::vector<unique_fd> fds;  // closed on every throw below
    std::string rest;
    const auto j = json::parse(read_reply_with_fds(s.get(), fds, rest), nullptr, false);
    if (!j.is_object() || !j.contains("ok")) throw launch_error("launcher-service", "malformed reply");
    if (j["ok"] != true) throw_reply_error(j);
    const auto result = j.value("result", json::object());
    const auto names = result.value("fds", json::array());
    if (!names.is_array() || names.size() != fds.size())
        throw launch_error("launcher-service", "the exec reply's descriptors do not match its list");
    exec_process::stdio io;
    for (std::size_t i = 0; i < fds.size(); ++i) {
        const auto name = names[i].is_string() ? names[i].get<std::string>() : std::string();
        unique_fd* slot = name == "stdin" ? &io.stdin_ : name == "stdout" ? &io.stdout_ : name == "stderr" ? &io.stderr_
                          : name == "pty"   ? &io.pty : nullptr;
        const bool right_kind = name == "pty" ? is_kind(fds[i].get(), S_IFCHR) : is_kind(fds[i].get(), S_IFIFO);
        if (slot == nullptr || *slot || !right_kind)
            throw launch_error("launcher-service", "the exec reply carried an unexpected descriptor ('" + name + "')");
        *slot = std::move(fds[i]);
    }
    if (spec.tty != static_cast<bool>(io.pty) || (!spec.tty && (!io.stdout_ || !io.stderr_)))
        throw launch_error("launcher-service", "the exec reply lacks the process's stdio");
    return exec_process(std::move(io), std::make_unique<exec_channel>(std::move(s), rest));
}

}  // namespace cellgate::launcher::service
