#include "wire/zmq_reactor.hpp"

#include "wire/zmtp_guard.hpp"

#include <spdlog/spdlog.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.hpp>

#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

namespace cellgate::wire {

namespace {

constexpr int max_messages_per_turn = 32;  // per socket
// Per kernel, across all its sockets: decoding costs in proportion to bytes
// (HMAC, JSON), so a kernel that has spent this many in a turn waits for the
// next one; a single message can still overshoot it by up to its own size.
constexpr std::size_t max_kernel_bytes_per_turn = 16u << 20;
// A turn of many large messages can last seconds; heartbeat echoes (and
// pings) are looked at again after this many bytes decoded (the cost of a
// message is in its bytes) or this long, whichever comes first.
constexpr std::size_t heartbeat_poll_bytes = 1u << 20;
constexpr std::chrono::milliseconds heartbeat_poll_interval{100};

// After a flood the heap keeps the pages it carried, freed but not returned:
// once this much kernel traffic has passed and the kernels have been quiet
// for a moment, the reactor gives it back.
constexpr std::size_t trim_after_bytes = 64u << 20;
constexpr std::chrono::milliseconds trim_after_quiet{1000};

void release_freed_memory() {
#ifdef __GLIBC__
    ::malloc_trim(0);
#endif
}

enum class socket_role { iopub, hb, shell, control, stdin_ };

messaging::channel channel_of(socket_role r) {
    switch (r) {
    case socket_role::shell: return messaging::channel::shell;
    case socket_role::control: return messaging::channel::control;
    case socket_role::stdin_: return messaging::channel::stdin_;
    default: return messaging::channel::iopub;
    }
}

}  // namespace

// Every socket is watched through its ZMQ_FD in one epoll set (edge
// triggered), so a turn costs in proportion to the sockets that have work,
// not to how many kernels exist. ZMQ_FD only says "look at ZMQ_EVENTS": after
// a wake-up, a send or a receive, a socket is drained until ZMQ_EVENTS shows
// no more input, or put on the ready list when its share of the turn is used.
struct zmq_reactor::impl {
    struct kernel_entry;
    struct watched {
        std::unique_ptr<zmtp_guard::lease> lease;  // the relay libzmq connects through; outlives sock
        zmq::socket_t sock;
        int fd = -1;  // its ZMQ_FD, read once: retire() must not throw
        kernel_entry* kernel = nullptr;
        std::uint64_t set_id = 0;
        socket_role role = socket_role::iopub;
        bool in_epoll = false;
        bool ready = false;  // on the ready list
    };
    struct channel_set {
        std::unique_ptr<watched> shell, control, stdin_;
    };
    struct kernel_entry {
        std::string id;
        launcher::kernel_endpoints endpoints;
        std::unique_ptr<protocol::hmac_signer> signer;
        kernel_handlers handlers;
        std::unique_ptr<watched> iopub, hb;
        std::map<std::uint64_t, channel_set> sets;
        std::uint64_t budget_turn = 0;  // the turn `spent` belongs to
        std::size_t spent = 0;          // bytes decoded in that turn
    };

    zmq::context_t ctx{1};
    protocol::decode_limits limits;
    std::unique_ptr<zmtp_guard> guard;
    std::map<std::string, std::unique_ptr<kernel_entry>> kernels;
    int epoll_fd = -1;
    std::vector<watched*> ready;
    std::uint64_t turn_no = 1;
    bool woken = false;  // the wake-up fired: commands are waiting
    // Pings come through their own list, not the command queue, so that they
    // go out between data messages on a long turn: commands wait for its end.
    std::mutex ping_mutex;
    std::vector<std::string> pings;
    std::size_t bytes_since_hb_poll = 0;
    std::chrono::steady_clock::time_point last_hb_poll;
    std::atomic<std::uint64_t> received{0}, sent{0}, dropped{0}, in_epoll{0};
    std::size_t bytes_since_trim = 0;
    const std::string identity_prefix = "cellgate-" + protocol::make_uuid().substr(0, 8) + "-";
    std::chrono::steady_clock::time_point last_traffic;

    // Builds a socket but does not watch it yet: a set is watched only once
    // all of it exists, so a failure half-way (EMFILE, libzmq's socket cap)
    // leaves nothing of it in the epoll set or on the ready list.
    std::unique_ptr<watched> make_socket(kernel_entry& k, zmq::socket_type type, const std::string& endpoint,
                                         std::uint64_t set_id, socket_role role) {
        auto w = std::make_unique<watched>();
        w->sock = zmq::socket_t(ctx, type);
        w->sock.set(zmq::sockopt::linger, 0);
        w->sock.set(zmq::sockopt::maxmsgsize,
                    static_cast<std::int64_t>(std::max(limits.max_json_part_bytes, limits.max_buffer_bytes)));
        if (type == zmq::socket_type::sub) w->sock.set(zmq::sockopt::subscribe, "");
        // ipykernel sends input_request on its stdin ROUTER to the identity
        // the execute_request came from on shell: a set's shell and stdin
        // must share one routing id, or the prompt goes nowhere and the cell
        // waits for an answer for ever (as jupyter_client does).
        if (role == socket_role::shell || role == socket_role::stdin_)
            w->sock.set(zmq::sockopt::routing_id, set_identity(set_id));
        w->fd = w->sock.get(zmq::sockopt::fd);
        if (guard) {
            const auto [wire_limits, window] = guard_limits(role);
            w->lease = guard->open(endpoint, wire_limits, window, k.id);
            w->sock.connect(w->lease->endpoint());
        } else {
            w->sock.connect(endpoint);
        }
        w->kernel = &k;
        w->set_id = set_id;
        w->role = role;
        return w;
    }

    // What the guard lets through per message, and how many bytes it lets
    // libzmq hold for a socket: more than one message (so one always
    // completes), far less than libzmq's 1,000 of them. Heartbeats are echoes
    // of our own 4-byte pings.
    std::pair<zmtp_reader::limits, std::size_t> guard_limits(socket_role role) const {
        if (role == socket_role::hb) return {{8, 64u << 10, 64u << 10}, 1u << 20};
        return {{limits.max_frames, limits.max_message_bytes, 64u << 10}, limits.max_message_bytes + (1u << 20)};
    }

    // Never throws.
    void watch(watched& w) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLET;
        ev.data.ptr = &w;
        if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, w.fd, &ev) != 0) {
            spdlog::error("zmq reactor: epoll_ctl failed: {}", std::strerror(errno));
        } else {
            w.in_epoll = true;
            ++in_epoll;
        }
        mark_ready(&w);  // a message may be waiting already
    }

    // Before a watched socket goes away: off the ready list and out of the
    // epoll set. zmq_close hands the socket to libzmq's reaper thread, which
    // keeps its ZMQ_FD open (and signalling) for a while, so epoll would not
    // forget it by itself and would report a freed pointer.
    void retire(std::unique_ptr<watched>& w) noexcept {
        if (!w) return;
        if (w->ready) std::erase(ready, w.get());
        if (w->in_epoll) {
            (void)::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, w->fd, nullptr);
            --in_epoll;
        }
        w.reset();
    }
    void retire_set(channel_set& set) noexcept {
        retire(set.shell);
        retire(set.control);
        retire(set.stdin_);
    }
    void retire_kernel(kernel_entry& k) noexcept {
        retire(k.iopub);
        retire(k.hb);
        for (auto& [id, set] : k.sets) retire_set(set);
    }

    void mark_ready(watched* w) {
        if (w->ready) return;
        w->ready = true;
        ready.push_back(w);
    }

    // Unique per set and per gateway process (a kernel taken back after a
    // restart must not see a new set under an old identity).
    std::string set_identity(std::uint64_t set_id) const { return identity_prefix + std::to_string(set_id); }

    // The three sockets are made first and watched after: if one throws,
    // the others are destroyed unwatched.
    channel_set make_set(kernel_entry& k, std::uint64_t set_id) {
        channel_set set;
        set.shell = make_socket(k, zmq::socket_type::dealer, k.endpoints.shell, set_id, socket_role::shell);
        set.control = make_socket(k, zmq::socket_type::dealer, k.endpoints.control, set_id, socket_role::control);
        set.stdin_ = make_socket(k, zmq::socket_type::dealer, k.endpoints.stdin_, set_id, socket_role::stdin_);
        watch(*set.shell);
        watch(*set.control);
        watch(*set.stdin_);
        return set;
    }

    // All or nothing: on a failure the kernel is left with no sockets (as
    // suspended; sends to it are dropped) and the error goes to the caller.
    void connect_kernel(kernel_entry& k) {
        retire_kernel(k);
        auto iopub = make_socket(k, zmq::socket_type::sub, k.endpoints.iopub, 0, socket_role::iopub);
        auto hb = make_socket(k, zmq::socket_type::dealer, k.endpoints.hb, 0, socket_role::hb);
        std::map<std::uint64_t, channel_set> sets;
        for (const auto& [set_id, unused] : k.sets) {
            channel_set set;
            set.shell = make_socket(k, zmq::socket_type::dealer, k.endpoints.shell, set_id, socket_role::shell);
            set.control = make_socket(k, zmq::socket_type::dealer, k.endpoints.control, set_id, socket_role::control);
            set.stdin_ = make_socket(k, zmq::socket_type::dealer, k.endpoints.stdin_, set_id, socket_role::stdin_);
            sets.emplace(set_id, std::move(set));
        }
        k.iopub = std::move(iopub);
        k.hb = std::move(hb);
        watch(*k.iopub);
        watch(*k.hb);
        for (auto& [set_id, set] : sets) {
            k.sets[set_id] = std::move(set);
            auto& s = k.sets[set_id];
            watch(*s.shell);
            watch(*s.control);
            watch(*s.stdin_);
        }
    }

    static bool has_input(watched& w) { return (w.sock.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0; }

    // Reads one multipart message without blocking; false when none is waiting.
    // Frames beyond the limit are drained and the message reported as too long.
    bool receive(zmq::socket_t& s, std::vector<std::string>& frames, std::size_t& bytes) {
        frames.clear();
        bool overflow = false;
        for (;;) {
            zmq::message_t part;
            const auto got = s.recv(part, zmq::recv_flags::dontwait);
            if (!got) return !frames.empty() || overflow;
            bytes += part.size();
            if (frames.size() < limits.max_frames + 1)
                frames.emplace_back(static_cast<const char*>(part.data()), part.size());
            else
                overflow = true;
            if (!part.more()) return true;
        }
    }

    // The kernel's bytes decoded in this turn, reset when a new turn begins.
    std::size_t& spent(kernel_entry& k) {
        if (k.budget_turn != turn_no) {
            k.budget_turn = turn_no;
            k.spent = 0;
        }
        return k.spent;
    }
    bool over_budget(const watched& w) {
        return w.role != socket_role::hb && spent(*w.kernel) >= max_kernel_bytes_per_turn;
    }

    // Serves one socket for at most its share of the turn: a number of
    // messages, and no more bytes than its kernel has left.
    void service(watched& w) {
        w.ready = false;
        kernel_entry& k = *w.kernel;
        std::vector<std::string> frames;
        std::size_t bytes = 0;
        for (int n = 0; n < max_messages_per_turn && !over_budget(w); ++n) {
            std::size_t message_bytes = 0;
            const bool got = receive(w.sock, frames, message_bytes);
            if (w.lease) w.lease->consumed(message_bytes);  // out of libzmq: the guard may relay more
            bytes += message_bytes;
            if (w.role != socket_role::hb) spent(k) += message_bytes;
            if (!got) {  // drained: the next edge will tell
                note_traffic(bytes);
                return;
            }
            if (w.role == socket_role::hb) {
                if (k.handlers.on_heartbeat) k.handlers.on_heartbeat();
                continue;
            }
            deliver(w, k, std::move(frames));
            frames = {};
            bytes_since_hb_poll += message_bytes;
            maybe_poll_heartbeats();
        }
        if (has_input(w)) mark_ready(&w);  // more than its share: back of the line
        note_traffic(bytes);
    }

    void deliver(const watched& w, kernel_entry& k, std::vector<std::string>&& frames) {
        auto decoded = protocol::decode(std::move(frames), *k.signer, limits);
        if (!decoded) {
            ++dropped;
            if (k.handlers.on_dropped)
                k.handlers.on_dropped(std::string(protocol::to_string(decoded.error)) +
                                      (decoded.detail.empty() ? "" : ": " + decoded.detail));
            return;
        }
        ++received;
        auto m = std::make_shared<messaging::kernel_message>();
        m->chan = channel_of(w.role);
        m->msg = std::move(decoded.msg);
        m->msg.identities.clear();  // the iopub topic and routing ids stay here
        m->fields = std::move(decoded.fields);
        if (k.handlers.on_message) k.handlers.on_message(w.set_id, std::move(m));
    }

    void collect_events(int timeout_ms);
    void take_pings();
    void maybe_poll_heartbeats() {
        const auto now = std::chrono::steady_clock::now();
        if (bytes_since_hb_poll < heartbeat_poll_bytes && now - last_hb_poll < heartbeat_poll_interval) return;
        poll_heartbeats(now);
    }
    void poll_heartbeats(std::chrono::steady_clock::time_point now) {
        bytes_since_hb_poll = 0;
        last_hb_poll = now;
        collect_events(0);
        take_pings();
    }

    // A throw here (a failed recv, a handler out of memory) loses this
    // socket's turn, never the thread, which every kernel shares.
    void service_safely(watched& w) noexcept {
        try {
            service(w);
        } catch (const std::exception& e) {
            // Not re-listed: a socket that keeps failing must not spin the thread.
            spdlog::error("zmq reactor: kernel {}: serving a socket failed: {}", w.kernel->id, e.what());
        }
    }

    void note_traffic(std::size_t bytes) {
        if (bytes == 0) return;
        bytes_since_trim += bytes;
        last_traffic = std::chrono::steady_clock::now();
    }

    // How long epoll may sleep: not at all with sockets waiting, until the
    // trim is due after a flood, else until woken.
    int wait_timeout_ms() {
        if (!ready.empty()) return 0;
        if (bytes_since_trim < trim_after_bytes) return -1;
        const auto due = last_traffic + trim_after_quiet;
        const auto now = std::chrono::steady_clock::now();
        if (now < due)
            return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(due - now).count());
        spdlog::debug("zmq reactor: {} MiB of kernel traffic since the last trim; returning freed memory",
                      bytes_since_trim >> 20);
        release_freed_memory();
        bytes_since_trim = 0;
        return -1;
    }

    void send_frames(watched& w, const std::vector<std::string>& frames) {
        for (std::size_t i = 0; i < frames.size(); ++i) {
            const auto flags = (i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none) |
                               zmq::send_flags::dontwait;
            if (!w.sock.send(zmq::buffer(frames[i]), flags)) {
                ++dropped;  // the kernel is not reading: a full queue drops, never blocks the reactor
                break;
            }
        }
        ++sent;
        // A send may consume the fd's edge for input that arrived meanwhile.
        if (has_input(w)) mark_ready(&w);
    }
};

zmq_reactor::zmq_reactor(options opts) : impl_(std::make_unique<impl>()) {
    impl_->limits = opts.limits;
    if (opts.max_sockets > 0) impl_->ctx.set(zmq::ctxopt::max_sockets, opts.max_sockets);
    if (opts.guard) {
        // The handler runs on the guard's thread; the kernel's own on_dropped
        // runs here, as for every other dropped message.
        impl_->guard = std::make_unique<zmtp_guard>([this](const std::string& kernel_id, std::string_view why) {
            post([kernel_id, why = std::string(why)](impl& r) {
                ++r.dropped;
                const auto it = r.kernels.find(kernel_id);
                if (it != r.kernels.end() && it->second->handlers.on_dropped)
                    it->second->handlers.on_dropped(why + "; connection closed");
            });
        });
    }
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw std::runtime_error("zmq_reactor: eventfd failed");
    impl_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (impl_->epoll_fd < 0) throw std::runtime_error("zmq_reactor: epoll_create1 failed");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the wake-up
    if (::epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, wake_fd_, &ev) != 0)
        throw std::runtime_error("zmq_reactor: epoll_ctl failed");
}

zmq_reactor::~zmq_reactor() {
    stop();
    impl_->kernels.clear();
    impl_->guard.reset();  // its thread posts here: gone before the wake-up fd is
    ::close(impl_->epoll_fd);
    ::close(wake_fd_);
}

void zmq_reactor::start() {
    running_ = true;
    thread_ = std::thread([this] { run(); });
}

void zmq_reactor::stop() {
    if (!running_.exchange(false)) return;
    const std::uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
    if (thread_.joinable()) thread_.join();
}

void zmq_reactor::post(std::function<void(impl&)> command) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(command));
    }
    const std::uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
}

// Takes what epoll has to say, waiting up to timeout_ms; heartbeat sockets
// are served at once (unless already listed: then they are first in the
// next turn), the rest listed for their turn.
void zmq_reactor::impl::collect_events(int timeout_ms) {
    std::array<epoll_event, 256> events{};
    const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) spdlog::error("zmq reactor: epoll_wait failed: {}", std::strerror(errno));
    for (int i = 0; i < n; ++i) {
        auto* w = static_cast<watched*>(events[static_cast<std::size_t>(i)].data.ptr);
        if (w == nullptr) woken = true;
        else if (w->role == socket_role::hb && !w->ready) service_safely(*w);
        else mark_ready(w);
    }
}

void zmq_reactor::impl::take_pings() {
    std::vector<std::string> ids;
    {
        std::lock_guard lock(ping_mutex);
        ids.swap(pings);
    }
    for (const auto& id : ids) {
        const auto it = kernels.find(id);
        if (it == kernels.end() || !it->second->hb) continue;
        auto& hb = *it->second->hb;
        try {
            (void)hb.sock.send(zmq::str_buffer("ping"), zmq::send_flags::dontwait);
            if (!hb.ready && has_input(hb)) service_safely(hb);
        } catch (const std::exception& e) {
            spdlog::error("zmq reactor: kernel {}: ping failed: {}", id, e.what());
        }
    }
}

void zmq_reactor::run() {
    impl& r = *impl_;
    while (running_) {
        r.collect_events(r.wait_timeout_ms());
        r.poll_heartbeats(std::chrono::steady_clock::now());  // pings, and echoes that came meanwhile
        // Sockets first, commands after: a command may close a socket, and
        // nothing on this turn's list may point at a closed one. Heartbeats
        // before data, and again whenever a turn has run long.
        auto turn = std::move(r.ready);
        r.ready.clear();
        ++r.turn_no;
        for (auto* w : turn)
            if (w->ready && w->role == socket_role::hb) r.service_safely(*w);
        for (auto* w : turn) {
            if (!w->ready || w->role == socket_role::hb) continue;  // retired, or served above
            if (r.over_budget(*w)) {  // its kernel has had its share: next turn
                w->ready = false;
                r.mark_ready(w);
                continue;
            }
            r.service_safely(*w);
            r.maybe_poll_heartbeats();
        }
        if (!r.woken) continue;
        r.woken = false;
        std::uint64_t count = 0;
        (void)::read(wake_fd_, &count, sizeof count);
        std::deque<std::function<void(impl&)>> commands;
        {
            std::lock_guard lock(mutex_);
            commands.swap(queue_);
        }
        for (auto& c : commands) {
            try {
                c(r);
            } catch (const std::exception& e) {
                spdlog::error("zmq reactor: command failed: {}", e.what());
            }
        }
    }
    for (auto& [id, k] : r.kernels) r.retire_kernel(*k);
    r.kernels.clear();
}

void zmq_reactor::add_kernel(const std::string& kernel_id, const launcher::kernel_endpoints& endpoints,
                             kernel_handlers handlers) {
    post([kernel_id, endpoints, handlers = std::move(handlers)](impl& r) mutable {
        auto& slot = r.kernels[kernel_id];
        if (!slot) {
            slot = std::make_unique<impl::kernel_entry>();
            slot->id = kernel_id;
        }
        slot->endpoints = endpoints;
        slot->signer = std::make_unique<protocol::hmac_signer>(endpoints.key);
        slot->handlers = std::move(handlers);
        r.connect_kernel(*slot);
    });
}

void zmq_reactor::remove_kernel(const std::string& kernel_id) {
    post([kernel_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end()) return;
        r.retire_kernel(*it->second);
        r.kernels.erase(it);
    });
}

void zmq_reactor::suspend_kernel(const std::string& kernel_id) {
    post([kernel_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it != r.kernels.end()) r.retire_kernel(*it->second);  // channel set ids stay
    });
}

void zmq_reactor::open_channels(const std::string& kernel_id, std::uint64_t set_id) {
    post([kernel_id, set_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end() || it->second->sets.count(set_id) != 0) return;
        auto& k = *it->second;
        // Suspended (between two sandboxes of a restart): made on the next add_kernel.
        k.sets.emplace(set_id, k.iopub ? r.make_set(k, set_id) : impl::channel_set{});
    });
}

void zmq_reactor::close_channels(const std::string& kernel_id, std::uint64_t set_id) {
    post([kernel_id, set_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end()) return;
        const auto set = it->second->sets.find(set_id);
        if (set == it->second->sets.end()) return;
        r.retire_set(set->second);
        it->second->sets.erase(set);
    });
}

void zmq_reactor::send(const std::string& kernel_id, std::uint64_t set_id, messaging::channel chan,
                       protocol::message msg) {
    post([kernel_id, set_id, chan, msg = std::move(msg)](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end()) return;
        const auto set = it->second->sets.find(set_id);
        if (set == it->second->sets.end()) return;
        auto& w = chan == messaging::channel::control ? set->second.control
                  : chan == messaging::channel::stdin_ ? set->second.stdin_
                                                 : set->second.shell;
        if (!w) {
            ++r.dropped;
            return;
        }
        r.send_frames(*w, protocol::encode(msg, *it->second->signer));
    });
}

void zmq_reactor::ping(const std::string& kernel_id) {
    {
        std::lock_guard lock(impl_->ping_mutex);
        impl_->pings.push_back(kernel_id);
    }
    const std::uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
}

zmq_reactor::stats zmq_reactor::counters() const {
    return {impl_->received.load(), impl_->sent.load(), impl_->dropped.load(), impl_->in_epoll.load()};
}

}  // namespace cellgate::wire
