#include "wire/zmtp_guard.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <list>
#include <stdexcept>

namespace cellgate::wire {

namespace {

// Per connection and direction. Kernel to gateway is the hot one (output);
// the other carries requests. Pages are touched only as data needs them.
constexpr std::size_t up_buffer_bytes = 64u << 10;
constexpr std::size_t down_buffer_bytes = 16u << 10;
// Rounds of read/write per event, so one busy connection cannot hold the
// thread; level-triggered epoll reports it again.
constexpr int max_rounds_per_event = 16;

enum class kind { wake, listener, zmq_side, kernel_side };
struct tag {
    kind k;
    void* owner;
};

struct buffer {
    explicit buffer(std::size_t n) : data(new char[n]), cap(n) {}
    std::unique_ptr<char[]> data;
    std::size_t cap, head = 0, tail = 0;
    std::size_t size() const noexcept { return tail - head; }
    std::size_t space() noexcept {
        if (head == tail) head = tail = 0;
        else if (tail == cap && head > 0) {
            std::memmove(data.get(), data.get() + head, tail - head);
            tail -= head;
            head = 0;
        }
        return cap - tail;
    }
};

bool would_block(ssize_t n) { return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR); }

sockaddr_un unix_address(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof a.sun_path) throw std::runtime_error("zmtp guard: socket path too long: " + path);
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    return a;
}

}  // namespace

struct zmtp_guard::route : std::enable_shared_from_this<zmtp_guard::route> {
    std::string kernel_path, own_path, endpoint, label;
    zmtp_reader::limits limits;
    std::size_t window = 0;
    std::atomic<std::uint64_t> consumed{0};  // by the reactor
    std::atomic<bool> stalled{false};        // the guard waits for consumed to move
    // Guard thread only:
    int listen_fd = -1;
    tag listen_tag{kind::listener, this};
    std::uint64_t written = 0;  // message bytes handed to libzmq
    std::uint64_t lost = 0;     // of those, in messages libzmq dropped half-way
    bool open = true;

    bool has_credit() const noexcept {
        const auto taken = consumed.load() + lost;
        return written < taken || written - taken < window;
    }
};

namespace {

struct link {
    std::shared_ptr<zmtp_guard::route> r;
    int zfd = -1, kfd = -1;  // libzmq's end, the kernel's end
    tag ztag{kind::zmq_side, this}, ktag{kind::kernel_side, this};
    buffer up{up_buffer_bytes}, down{down_buffer_bytes};
    zmtp_reader check, written;  // what was read from the kernel; what libzmq got of it
    std::uint32_t zev = 0, kev = 0;
    bool dead = false;
    link(std::shared_ptr<zmtp_guard::route> route, int z, int k)
        : r(std::move(route)), zfd(z), kfd(k), check(r->limits), written(r->limits) {}
};

}  // namespace

struct zmtp_guard::impl {
    zmtp_guard& g;
    std::list<std::unique_ptr<link>> links;
    std::vector<std::shared_ptr<route>> routes;
    explicit impl(zmtp_guard& guard) : g(guard) {}

    void set_interest(int fd, std::uint32_t& current, std::uint32_t wanted, tag* t) {
        if (wanted == current) return;
        epoll_event ev{};
        ev.events = wanted;
        ev.data.ptr = t;
        (void)::epoll_ctl(g.epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
        current = wanted;
    }

    // Reads from the kernel only with room and credit. Stalling sets the
    // flag first and looks again, so a consume() in between is not missed.
    bool may_read_kernel(link& l) {
        if (l.up.space() == 0) return false;
        if (l.r->has_credit()) return true;
        l.r->stalled = true;
        if (!l.r->has_credit()) return false;
        l.r->stalled = false;
        return true;
    }

    void update_interest(link& l) {
        set_interest(l.kfd, l.kev, (may_read_kernel(l) ? EPOLLIN : 0u) | (l.down.size() ? EPOLLOUT : 0u), &l.ktag);
        set_interest(l.zfd, l.zev, (l.down.space() ? EPOLLIN : 0u) | (l.up.size() ? EPOLLOUT : 0u), &l.ztag);
    }

    void close_link(link& l) {
        if (l.dead) return;
        l.dead = true;
        // libzmq drops the message it has only part of; its bytes will never be consumed.
        l.r->lost += l.written.partial_message_bytes();
        for (int fd : {l.zfd, l.kfd}) {
            (void)::epoll_ctl(g.epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
            ::close(fd);
        }
    }

    // Hands buffered kernel bytes to libzmq; false if the link died.
    bool write_up(link& l, bool& moved) {
        if (l.up.size() == 0) return true;
        // MSG_NOSIGNAL: a peer that has gone (a removed sandbox) is EPIPE
        // here, not a SIGPIPE that ends the gateway.
        const ssize_t n = ::send(l.zfd, l.up.data.get() + l.up.head, l.up.size(), MSG_NOSIGNAL);
        if (n > 0) {
            const auto before = l.written.payload_bytes();
            l.written.feed(std::string_view(l.up.data.get() + l.up.head, static_cast<std::size_t>(n)));
            l.r->written += l.written.payload_bytes() - before;
            l.up.head += static_cast<std::size_t>(n);
            moved = true;
        } else if (!would_block(n)) {
            close_link(l);
            return false;
        }
        return true;
    }

    // One step in each direction; true if anything moved.
    bool step_up(link& l) {
        bool moved = false;
        if (!write_up(l, moved) || !may_read_kernel(l)) return moved;
        char* at = l.up.data.get() + l.up.tail;
        const ssize_t n = ::read(l.kfd, at, l.up.space());
        if (n == 0 || (n < 0 && !would_block(n))) {
            close_link(l);
            return false;
        }
        if (n < 0) return moved;
        const auto good = l.check.feed(std::string_view(at, static_cast<std::size_t>(n)));
        l.up.tail += good;
        if (l.check.status() != zmtp_reader::verdict::ok) {
            // Messages that came before the bad frame in the same read are
            // the kernel's own: pass them on (best effort) before closing.
            for (int i = 0; i < max_rounds_per_event && l.up.size() > 0 && !l.dead; ++i) {
                bool unused = false;
                if (!write_up(l, unused) || !unused) break;
            }
            ++g.refused_;
            if (g.on_refused_) g.on_refused_(l.r->label, to_string(l.check.status()));
            close_link(l);
            return false;
        }
        return true;
    }

    bool step_down(link& l) {
        bool moved = false;
        if (l.down.size() > 0) {
            const ssize_t n = ::send(l.kfd, l.down.data.get() + l.down.head, l.down.size(), MSG_NOSIGNAL);
            if (n > 0) {
                l.down.head += static_cast<std::size_t>(n);
                moved = true;
            } else if (!would_block(n)) {
                close_link(l);
                return false;
            }
        }
        if (l.down.space() == 0) return moved;
        const ssize_t n = ::read(l.zfd, l.down.data.get() + l.down.tail, l.down.space());
        if (n == 0 || (n < 0 && !would_block(n))) {
            close_link(l);
            return false;
        }
        if (n > 0) l.down.tail += static_cast<std::size_t>(n);
        return n > 0 || moved;
    }

    void pump(link& l, std::uint32_t events, bool kernel_side) {
        // A hang-up on a side we are not reading from would repeat forever.
        const std::uint32_t reading = kernel_side ? (l.kev & EPOLLIN) : (l.zev & EPOLLIN);
        if ((events & (EPOLLHUP | EPOLLERR)) != 0 && reading == 0) {
            close_link(l);
            return;
        }
        for (int i = 0; i < max_rounds_per_event && !l.dead; ++i) {
            const bool up = step_up(l);
            const bool down = !l.dead && step_down(l);
            if (!up && !down) break;
        }
        if (!l.dead) update_interest(l);
    }

    void accept_on(route& r) {
        for (;;) {
            const int z = ::accept4(r.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (z < 0) return;  // EAGAIN, or out of fds: libzmq retries
            const int k = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            const auto addr = unix_address(r.kernel_path);
            if (k < 0 || ::connect(k, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
                // Not listening yet (starting, restarting): libzmq sees the
                // close and reconnects after its interval, as it would have.
                if (k >= 0) ::close(k);
                ::close(z);
                continue;
            }
            add_link(r, z, k);
        }
    }

    void add_link(route& r, int z, int k) {
        auto l = std::make_unique<link>(r.shared_from_this(), z, k);
        for (auto [fd, t] : {std::pair{z, &l->ztag}, std::pair{k, &l->ktag}}) {
            epoll_event ev{};
            ev.data.ptr = t;
            (void)::epoll_ctl(g.epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
        }
        update_interest(*l);
        links.push_back(std::move(l));
    }

    void open_route(std::shared_ptr<route> r) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = &r->listen_tag;
        (void)::epoll_ctl(g.epoll_fd_, EPOLL_CTL_ADD, r->listen_fd, &ev);
        routes.push_back(std::move(r));
    }

    void close_route(const std::shared_ptr<route>& r) {
        r->open = false;
        (void)::epoll_ctl(g.epoll_fd_, EPOLL_CTL_DEL, r->listen_fd, nullptr);
        ::close(r->listen_fd);
        for (auto& l : links)
            if (l->r == r) close_link(*l);
        std::erase(routes, r);
    }

    // After open/close requests and consume() wake-ups: a stalled route may
    // read again.
    void on_wake() {
        std::uint64_t count = 0;
        (void)::read(g.wake_fd_, &count, sizeof count);
        std::vector<std::shared_ptr<route>> opened, closed;
        {
            std::lock_guard lock(g.mutex_);
            opened.swap(g.opened_);
            closed.swap(g.closed_);
        }
        for (auto& r : opened) open_route(std::move(r));
        for (auto& r : closed) close_route(r);
        for (auto& l : links)
            if (!l->dead) pump(*l, 0, true);
    }

    void dispatch(const epoll_event& ev) {
        auto* t = static_cast<tag*>(ev.data.ptr);
        switch (t->k) {
        case kind::wake: on_wake(); break;
        case kind::listener: {
            auto* r = static_cast<route*>(t->owner);
            if (r->open) accept_on(*r);
            break;
        }
        case kind::zmq_side:
        case kind::kernel_side: {
            auto* l = static_cast<link*>(t->owner);
            if (!l->dead) pump(*l, ev.events, t->k == kind::kernel_side);
            break;
        }
        }
    }
};

zmtp_guard::zmtp_guard(refused_handler on_refused, std::filesystem::path parent)
    : on_refused_(std::move(on_refused)) {
    std::string tmpl = (parent / "cellgate-wire-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)  // 0700: no other user can reach the guard's sockets
        throw std::runtime_error(std::string("zmtp guard: mkdtemp failed: ") + std::strerror(errno));
    dir_ = tmpl;
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (wake_fd_ < 0 || epoll_fd_ < 0) throw std::runtime_error("zmtp guard: eventfd/epoll_create1 failed");
    static tag wake_tag{kind::wake, nullptr};
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &wake_tag;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) throw std::runtime_error("zmtp guard: epoll_ctl failed");
    impl_ = std::make_unique<impl>(*this);
    thread_ = std::thread([this] { run(); });
}

zmtp_guard::~zmtp_guard() {
    running_ = false;
    wake();
    thread_.join();
    for (auto& l : impl_->links) impl_->close_link(*l);
    for (auto& r : impl_->routes) ::close(r->listen_fd);
    {
        std::lock_guard lock(mutex_);
        for (auto& r : opened_) ::close(r->listen_fd);
    }
    ::close(epoll_fd_);
    ::close(wake_fd_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

void zmtp_guard::run() {
    std::array<epoll_event, 64> events{};
    while (running_) {
        const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), -1);
        for (int i = 0; i < n; ++i) impl_->dispatch(events[static_cast<std::size_t>(i)]);
        // Freed only now: a later event of the same batch may name a closed link.
        impl_->links.remove_if([](const auto& l) { return l->dead; });
    }
}

void zmtp_guard::wake() noexcept {
    const std::uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
}

std::unique_ptr<zmtp_guard::lease> zmtp_guard::open(const std::string& kernel_endpoint,
                                                    const zmtp_reader::limits& limits, std::size_t window_bytes,
                                                    std::string label) {
    constexpr std::string_view scheme = "ipc://";
    if (kernel_endpoint.rfind(scheme, 0) != 0)
        throw std::runtime_error("zmtp guard: not an ipc endpoint: " + kernel_endpoint);
    auto r = std::make_shared<route>();
    r->kernel_path = kernel_endpoint.substr(scheme.size());
    r->own_path = (dir_ / std::to_string(next_id_++)).string();
    r->endpoint = "ipc://" + r->own_path;
    r->limits = limits;
    r->window = window_bytes;
    r->label = std::move(label);
    (void)unix_address(r->kernel_path);  // throws here, not on the guard's thread
    const auto addr = unix_address(r->own_path);
    r->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r->listen_fd < 0) throw std::runtime_error(std::string("zmtp guard: socket: ") + std::strerror(errno));
    if (::bind(r->listen_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(r->listen_fd, 8) != 0) {
        const int e = errno;
        ::close(r->listen_fd);
        throw std::runtime_error(std::string("zmtp guard: bind/listen: ") + std::strerror(e));
    }
    {
        std::lock_guard lock(mutex_);
        opened_.push_back(r);
    }
    wake();
    return std::unique_ptr<lease>(new lease(*this, std::move(r)));
}

void zmtp_guard::post_close(std::shared_ptr<route> r) {
    ::unlink(r->own_path.c_str());
    {
        std::lock_guard lock(mutex_);
        closed_.push_back(std::move(r));
    }
    wake();
}

zmtp_guard::lease::~lease() { guard_.post_close(std::move(route_)); }

const std::string& zmtp_guard::lease::endpoint() const noexcept { return route_->endpoint; }

void zmtp_guard::lease::consumed(std::size_t bytes) noexcept {
    route_->consumed += bytes;
    if (route_->stalled.exchange(false)) guard_.wake();
}

}  // namespace cellgate::wire
