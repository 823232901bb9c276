#include "relay/host_relay.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

namespace cellgate::launcher::relay {
namespace fs = std::filesystem;

namespace {

// What an epoll event belongs to: the kind in the top byte, an index below.
enum tag_kind : std::uint64_t { from_sandbox_tag = 1, to_sandbox_tag = 2, listener_tag = 3, client_tag = 4 };
std::uint64_t tag(tag_kind k, std::uint64_t index) { return (static_cast<std::uint64_t>(k) << 56) | index; }

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

class loop {
public:
    explicit loop(const host_relay_options& o) : o_(o), mux_(o.limits, o.resumed) {}

    ~loop() {
        for (auto& [id, c] : clients_) ::close(c.fd);
        for (int i = 0; i < channel_count; ++i) {
            if (listeners_[i] < 0) continue;
            ::close(listeners_[i]);
            ::unlink(socket_path(i).c_str());
        }
        if (epoll_ >= 0) ::close(epoll_);
    }

    host_relay_result run() {
        epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
        if (epoll_ < 0) return {false, errno_text("epoll_create1")};
        for (int fd : {o_.from_sandbox, o_.to_sandbox})
            ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        if (!watch(o_.from_sandbox, EPOLLIN, tag(from_sandbox_tag, 0))) return {false, errno_text("epoll_ctl")};
        std::vector<char> buf(256 << 10);
        epoll_event events[64];
        for (;;) {
            flush();
            if (mux_.failed()) end(true, "protocol error from the sandbox: " + mux_.error());
            if (ended_) return result_;
            update_interest();
            const int n = ::epoll_wait(epoll_, events, 64, -1);
            if (n < 0) {
                if (errno == EINTR) continue;
                return {false, errno_text("epoll_wait")};
            }
            for (int i = 0; i < n && !ended_; ++i) {
                const auto t = events[i].data.u64;
                const auto kind = static_cast<tag_kind>(t >> 56);
                const auto index = t & ((std::uint64_t{1} << 56) - 1);
                if (kind == from_sandbox_tag) read_sandbox(buf);
                else if (kind == to_sandbox_tag) write_sandbox();
                else if (kind == listener_tag) accept_clients(static_cast<int>(index));
                else if (kind == client_tag) on_client(static_cast<std::uint32_t>(index), events[i].events, buf);
            }
        }
    }

private:
    struct client {
        int fd = -1;
        std::uint32_t interest = 0;
        bool registered = false;
    };

    fs::path socket_path(int channel) const { return o_.socket_dir / ("k-" + std::to_string(channel + 1)); }

    void log(const std::string& line) const {
        if (o_.log) o_.log(line);
    }

    void end(bool protocol_error, std::string reason) {
        if (ended_) return;
        ended_ = true;
        result_ = {protocol_error, std::move(reason)};
    }

    bool watch(int fd, std::uint32_t events, std::uint64_t data) {
        epoll_event ev{};
        ev.events = events;
        ev.data.u64 = data;
        return ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) == 0;
    }

    void read_sandbox(std::vector<char>& buf) {
        const ssize_t n = ::read(o_.from_sandbox, buf.data(), buf.size());
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) end(false, errno_text("reading from the sandbox"));
            return;
        }
        if (n == 0) return end(false, "the sandbox closed its output");
        if (!mux_.feed(std::string_view(buf.data(), static_cast<std::size_t>(n))))
            return end(true, "protocol error from the sandbox: " + mux_.error());
        if (mux_.ready() && !listening_) listen_all();
        for (const auto id : mux_.take_finished()) close_client(id);
    }

    void write_sandbox() {
        const auto pending = mux_.to_sandbox();
        if (pending.empty()) return;
        const ssize_t n = ::write(o_.to_sandbox, pending.data(), pending.size());
        if (n < 0) {
            if (errno == EPIPE) end(false, "the sandbox closed its input");
            else if (errno != EAGAIN && errno != EINTR) end(false, errno_text("writing to the sandbox"));
            return;
        }
        mux_.sandbox_written(static_cast<std::size_t>(n));
    }

    // Made once the kernel has bound its sockets inside: before that a client
    // would only be refused, and the launcher waits for these paths to appear.
    // k-1 (shell, which the launcher probes first) is made last.
    void listen_all() {
        listening_ = true;
        for (int ch = channel_count - 1; ch >= 0; --ch) {
            const auto path = socket_path(ch);
            sockaddr_un addr{};
            addr.sun_family = AF_UNIX;
            if (path.native().size() >= sizeof addr.sun_path) return end(false, "socket path too long: " + path.string());
            std::memcpy(addr.sun_path, path.c_str(), path.native().size() + 1);
            const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0) return end(false, errno_text("socket"));
            ::unlink(path.c_str());
            if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 64) != 0 ||
                !watch(fd, EPOLLIN, tag(listener_tag, static_cast<std::uint64_t>(ch)))) {
                const auto why = errno_text(("listening on " + path.string()).c_str());
                ::close(fd);
                return end(false, why);
            }
            listeners_[ch] = fd;
        }
        log("the kernel's sockets are ready; listening in " + o_.socket_dir.string());
    }

    void accept_clients(int channel) {
        for (;;) {
            const int fd = ::accept4(listeners_[channel], nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) return;  // EAGAIN, or a client that left before we got to it
            const auto id = mux_.open(channel);
            if (id == 0) {
                if (!refused_logged_) log("refusing connections: " + std::to_string(mux_.stream_count()) + " are open");
                refused_logged_ = true;
                ::close(fd);
                continue;
            }
            clients_[id] = client{fd, 0, false};
        }
    }

    void on_client(std::uint32_t id, std::uint32_t events, std::vector<char>& buf) {
        const auto it = clients_.find(id);
        if (it == clients_.end()) return;
        if (events & EPOLLOUT) write_client(id);
        if (!clients_.count(id)) return;
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
            const auto room = mux_.readable(id);
            if (room == 0) {
                if (events & (EPOLLHUP | EPOLLERR)) drop_client(id);
                return;
            }
            const ssize_t n = ::recv(it->second.fd, buf.data(), std::min(room, buf.size()), MSG_DONTWAIT);
            if (n > 0) mux_.local_data(id, std::string_view(buf.data(), static_cast<std::size_t>(n)));
            else if (n == 0 || (errno != EAGAIN && errno != EINTR)) drop_client(id);
        }
    }

    void write_client(std::uint32_t id) {
        const auto it = clients_.find(id);
        if (it == clients_.end()) return;
        const auto pending = mux_.to_local(id);
        if (pending.empty()) return;
        const ssize_t n = ::send(it->second.fd, pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) drop_client(id);
            return;
        }
        mux_.local_written(id, static_cast<std::size_t>(n));
    }

    // The local side ended: tell the sandbox.
    void drop_client(std::uint32_t id) {
        mux_.local_closed(id);
        close_client(id);
    }

    // The stream is over on both sides (or the sandbox ended it).
    void close_client(std::uint32_t id) {
        const auto it = clients_.find(id);
        if (it == clients_.end()) return;
        ::close(it->second.fd);  // also removes it from epoll
        clients_.erase(it);
    }

    // Writes whatever can go now, so a message costs no extra epoll turn.
    void flush() {
        if (ended_) return;
        for (auto& [id, c] : clients_)
            if (!mux_.to_local(id).empty()) pending_ids_.push_back(id);
        for (const auto id : pending_ids_) write_client(id);
        pending_ids_.clear();
        for (const auto id : mux_.take_finished()) close_client(id);
        write_sandbox();
    }

    void update_interest() {
        for (auto& [id, c] : clients_) {
            std::uint32_t want = 0;
            if (mux_.readable(id) > 0) want |= EPOLLIN;
            if (!mux_.to_local(id).empty()) want |= EPOLLOUT;
            if (want == c.interest && c.registered == (want != 0)) continue;
            // A client with nothing to do is taken out of epoll, or its hang-up
            // would wake the loop over and over while it waits for credit.
            epoll_event ev{};
            ev.events = want;
            ev.data.u64 = tag(client_tag, id);
            if (want == 0) {
                if (c.registered) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
                c.registered = false;
            } else {
                ::epoll_ctl(epoll_, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &ev);
                c.registered = true;
            }
            c.interest = want;
        }
        const bool want_out = !mux_.to_sandbox().empty();
        if (want_out != out_registered_) {
            epoll_event ev{};
            ev.events = EPOLLOUT;
            ev.data.u64 = tag(to_sandbox_tag, 0);
            ::epoll_ctl(epoll_, want_out ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, o_.to_sandbox, &ev);
            out_registered_ = want_out;
        }
    }

    const host_relay_options& o_;
    relay_mux mux_;
    int epoll_ = -1;
    int listeners_[channel_count] = {-1, -1, -1, -1, -1};
    bool listening_ = false;
    bool out_registered_ = false;
    bool refused_logged_ = false;
    std::map<std::uint32_t, client> clients_;
    std::vector<std::uint32_t> pending_ids_;
    bool ended_ = false;
    host_relay_result result_;
};

}  // namespace

host_relay_result run_host_relay(const host_relay_options& options) {
    loop l(options);
    return l.run();
}

}  // namespace cellgate::launcher::relay
