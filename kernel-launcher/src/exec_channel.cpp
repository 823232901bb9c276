#include "exec_channel.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace cellgate::launcher {

namespace {

// The peer closed or broke the protocol without reporting: nobody can tell how the process ended.
constexpr exec_exit unknown_exit{-1, 0};

}  // namespace

bool exec_channel::state::send_signal(int sig) {
    std::lock_guard lock(mutex);
    if (exit || !socket) return false;
    const auto line = signal_line(sig);
    // A few bytes on a socket the peer reads all the time: it never fills.
    const auto n = ::send(socket.get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == static_cast<ssize_t>(line.size());
}

bool exec_channel::state::ended() {
    std::lock_guard lock(mutex);
    if (exit) return true;
    pollfd p{socket.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
}

exec_channel::exec_channel(unique_fd socket, std::string_view pending)
    : state_(std::make_shared<state>()), fd_(socket.get()) {
    state_->socket = std::move(socket);
    if (!state_->in.append(pending)) state_->exit = unknown_exit;
}

void exec_channel::signal(int sig) {
    // A process that has ended takes no signals; that is not an error.
    state_->send_signal(sig);
}

std::optional<exec_exit> exec_channel::exit_status() {
    auto& s = *state_;
    std::lock_guard lock(s.mutex);
    if (s.exit) return s.exit;
    for (;;) {
        if (auto line = s.in.pop()) {
            s.exit = parse_exit_line(*line).value_or(unknown_exit);
            return s.exit;
        }
        char buf[512];
        const auto n = ::recv(s.socket.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::nullopt;
        if (n <= 0 || !s.in.append({buf, static_cast<std::size_t>(n)})) {
            s.exit = unknown_exit;
            return s.exit;
        }
    }
}

}  // namespace cellgate::launcher
