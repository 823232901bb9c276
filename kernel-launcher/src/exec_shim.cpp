#include "exec_shim.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "command.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

namespace cellgate::launcher {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr auto shim_spawn_timeout = std::chrono::seconds(10);
// Beyond the runtime's own start: the shim reads the pid files and answers.
constexpr auto shim_answer_margin = std::chrono::seconds(5);

std::vector<std::string> string_array(const json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array()) throw std::invalid_argument(std::string(key) + " must be an array");
    std::vector<std::string> out;
    for (const auto& v : *it) {
        if (!v.is_string()) throw std::invalid_argument(std::string(key) + " must hold strings");
        out.push_back(v.get<std::string>());
    }
    return out;
}

std::string string_field(const json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) throw std::invalid_argument(std::string(key) + " must be a string");
    return it->get<std::string>();
}

// Receives one descriptor sent with SCM_RIGHTS on a connection accepted from
// `listener`; -1 if none came.
unique_fd receive_console(int listener) {
    const unique_fd conn{::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC)};
    if (!conn) throw launch_error("exec-start", "accept on the console socket", errno);
    char data[256];
    iovec iov{data, sizeof data};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    pollfd p{conn.get(), POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) throw launch_error("exec-start", "the runtime sent no terminal", ETIMEDOUT);
    if (::recvmsg(conn.get(), &msg, MSG_CMSG_CLOEXEC) < 0)
        throw launch_error("exec-start", "recvmsg on the console socket", errno);
    std::vector<unique_fd> got;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < n; ++i) {
            int fd = -1;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            got.emplace_back(fd);
        }
    }
    if (got.size() != 1 || (msg.msg_flags & MSG_CTRUNC) != 0 || ::isatty(got.front().get()) == 0)
        throw launch_error("exec-start", "the runtime's console socket did not carry one terminal");
    return std::move(got.front());
}

}  // namespace

std::string shim_request_line(const shim_request& r) {
    const auto& c = r.command;
    return json{{"start", c.start},
                {"pid_file", c.pid_file},
                {"internal_pid_file", c.internal_pid_file},
                {"signal_command", c.signal_command},
                {"status_is_exit_code", c.status_is_exit_code},
                {"log", c.log},
                {"start_timeout_ms", r.start_timeout.count()}}
               .dump() +
           "\n";
}

shim_request parse_shim_request(std::string_view line) {
    if (line.size() > max_shim_request_bytes) throw std::invalid_argument("request too large");
    const auto j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.size() != 7) throw std::invalid_argument("a request is one object of 7 fields");
    shim_request r;
    r.command.start = string_array(j, "start");
    if (r.command.start.empty()) throw std::invalid_argument("start is empty");
    r.command.pid_file = string_field(j, "pid_file");
    r.command.internal_pid_file = string_field(j, "internal_pid_file");
    r.command.signal_command = string_array(j, "signal_command");
    r.command.log = string_field(j, "log");
    const auto code = j.find("status_is_exit_code");
    if (code == j.end() || !code->is_boolean()) throw std::invalid_argument("status_is_exit_code must be a bool");
    r.command.status_is_exit_code = code->get<bool>();
    const auto timeout = j.find("start_timeout_ms");
    if (timeout == j.end() || !timeout->is_number_unsigned() || timeout->get<std::uint64_t>() > 600000)
        throw std::invalid_argument("start_timeout_ms must be 0…600000");
    r.start_timeout = std::chrono::milliseconds(timeout->get<std::uint64_t>());
    if (!r.command.signal_command.empty() && r.command.internal_pid_file.empty())
        throw std::invalid_argument("a signal_command needs an internal_pid_file");
    return r;
}

std::string shim_started_line() { return R"({"started":{}})" "\n"; }

std::string shim_error_line(std::string_view message) {
    return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

exec_exit exit_of(int wait_status, bool status_is_exit_code, const std::set<int>& sent) {
    if (WIFSIGNALED(wait_status)) {
        // runc: the process itself died of it. runsc: its waiter was killed,
        // and nobody knows what became of the process.
        if (status_is_exit_code) return {-1, 0};
        return {128 + WTERMSIG(wait_status), WTERMSIG(wait_status)};
    }
    if (!WIFEXITED(wait_status)) return {-1, 0};
    const int code = WEXITSTATUS(wait_status);
    if (!status_is_exit_code) return {code, 0};
    if (code > 128 && sent.count(code - 128) != 0) return {code, code - 128};
    if (code == 128 && sent.count(SIGKILL) != 0) return {128 + SIGKILL, SIGKILL};
    return {code, 0};
}

std::string find_exec_shim_binary(const std::string& configured) {
    if (!configured.empty()) return find_executable(configured);
    std::error_code ec;
    const auto self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const auto sibling = self.parent_path() / "cellgate-exec-shim";
        if (::access(sibling.c_str(), X_OK) == 0) return sibling.string();
    }
    return find_executable("cellgate-exec-shim");
}

started_exec start_exec_shim(const std::string& shim_binary, const shim_request& request, const shim_stdio& theirs,
                             exec_process::stdio ours, int console_listener, std::uint16_t rows, std::uint16_t cols) {
    int pair[2] = {-1, -1};
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
        throw launch_error("exec-start", "socketpair", errno);
    unique_fd control{pair[0]};
    unique_fd shim_end{pair[1]};
    const unique_fd null{::open("/dev/null", O_RDWR | O_CLOEXEC)};
    if (!null) throw launch_error("exec-start", "open /dev/null", errno);
    auto or_null = [&](int fd) { return fd >= 0 ? fd : null.get(); };

    command_fds fds;
    fds.stdout_fd = null.get();
    fds.stderr_fd = null.get();
    fds.extra_fds = {shim_end.get(), or_null(theirs.stdin_fd), or_null(theirs.stdout_fd), or_null(theirs.stderr_fd)};
    // The shim forks and its first process exits at once; the second one,
    // in a session of its own, is what the socket talks to.
    const auto r = run_command({shim_binary}, shim_spawn_timeout, fds);
    shim_end.reset();
    if (r.timed_out) throw launch_error("exec-start", "cellgate-exec-shim did not start in time", ETIMEDOUT);
    if (r.exit_code != 0) throw launch_error("exec-start", "cellgate-exec-shim exited " + std::to_string(r.exit_code));

    // From here on, closing `control` (every throw below) makes the shim kill
    // whatever the runtime started.
    const auto line = shim_request_line(request);
    for (std::size_t done = 0; done < line.size();) {
        const auto n = ::send(control.get(), line.data() + done, line.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw launch_error("exec-start", "cellgate-exec-shim went away", errno);
        done += static_cast<std::size_t>(n);
    }

    const auto deadline = std::chrono::steady_clock::now() + request.start_timeout + shim_answer_margin;
    line_buffer in(max_shim_reply_bytes);
    std::optional<std::string> answer;
    const bool want_console = console_listener >= 0;
    while (!answer || (want_console && !ours.pty)) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) throw launch_error("exec-start", "the process did not start in time", ETIMEDOUT);
        pollfd p[2] = {{answer ? -1 : control.get(), POLLIN, 0},
                       {want_console && !ours.pty ? console_listener : -1, POLLIN, 0}};
        if (::poll(p, 2, static_cast<int>(left.count())) < 0) {
            if (errno == EINTR) continue;
            throw launch_error("exec-start", "poll", errno);
        }
        if ((p[1].revents & POLLIN) != 0) {
            ours.pty = receive_console(console_listener);
            set_pty_size(ours.pty.get(), rows, cols);
        }
        if (p[0].revents != 0) {
            char buf[1024];
            const auto n = ::recv(control.get(), buf, sizeof buf, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0 || !in.append({buf, static_cast<std::size_t>(n)}))
                throw launch_error("exec-start", "cellgate-exec-shim ended before the process started", EPIPE);
            answer = in.pop();
            if (answer) {
                const auto j = json::parse(*answer, nullptr, false);
                if (j.is_object() && j.contains("error") && j["error"].is_string())
                    throw launch_error("exec-start", j["error"].get<std::string>());
                if (!j.is_object() || !j.contains("started"))
                    throw launch_error("exec-start", "cellgate-exec-shim answered something else");
                // runc sends its master before it exits, runsc before it starts the process.
                if (want_console && !ours.pty) {
                    pollfd c{console_listener, POLLIN, 0};
                    if (::poll(&c, 1, 0) <= 0)
                        throw launch_error("exec-start", "the runtime started the process but sent no terminal");
                }
            }
        }
    }
    auto channel = std::make_unique<exec_channel>(std::move(control), in.take());
    auto watch = channel->watch();
    return {exec_process(std::move(ours), std::move(channel)), std::move(watch)};
}

}  // namespace cellgate::launcher
