#include "wire/zmq_reactor.hpp"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.hpp>

#include <map>
#include <vector>

namespace cellgate::wire {

namespace {

constexpr int max_messages_per_turn = 32;
constexpr std::size_t max_bytes_per_turn = 16u << 20;

enum class socket_role { iopub, hb, shell, control, stdin_ };

ws::channel channel_of(socket_role r) {
    switch (r) {
    case socket_role::shell: return ws::channel::shell;
    case socket_role::control: return ws::channel::control;
    case socket_role::stdin_: return ws::channel::stdin_;
    default: return ws::channel::iopub;
    }
}

}  // namespace

struct zmq_reactor::impl {
    struct channel_set {
        zmq::socket_t shell, control, stdin_;
    };
    struct kernel_entry {
        std::string id;
        launcher::kernel_endpoints endpoints;
        std::unique_ptr<protocol::hmac_signer> signer;
        kernel_handlers handlers;
        zmq::socket_t iopub, hb;
        std::map<std::uint64_t, channel_set> sets;
    };
    struct poll_target {
        kernel_entry* kernel;
        std::uint64_t set_id;
        socket_role role;
        zmq::socket_t* socket;
    };

    zmq::context_t ctx{1};
    protocol::decode_limits limits;
    std::map<std::string, std::unique_ptr<kernel_entry>> kernels;
    std::vector<zmq::pollitem_t> items;
    std::vector<poll_target> targets;
    bool dirty = true;
    std::atomic<std::uint64_t> received{0}, sent{0}, dropped{0};

    zmq::socket_t make_socket(zmq::socket_type type, const std::string& endpoint) {
        zmq::socket_t s(ctx, type);
        s.set(zmq::sockopt::linger, 0);
        s.set(zmq::sockopt::maxmsgsize,
              static_cast<std::int64_t>(std::max(limits.max_json_part_bytes, limits.max_buffer_bytes)));
        if (type == zmq::socket_type::sub) s.set(zmq::sockopt::subscribe, "");
        s.connect(endpoint);
        return s;
    }

    channel_set make_set(const kernel_entry& k) {
        return {make_socket(zmq::socket_type::dealer, k.endpoints.shell),
                make_socket(zmq::socket_type::dealer, k.endpoints.control),
                make_socket(zmq::socket_type::dealer, k.endpoints.stdin_)};
    }

    void connect_kernel(kernel_entry& k) {
        k.iopub = make_socket(zmq::socket_type::sub, k.endpoints.iopub);
        k.hb = make_socket(zmq::socket_type::dealer, k.endpoints.hb);
        for (auto& [set_id, set] : k.sets) set = make_set(k);
        dirty = true;
    }

    void rebuild_poll_items(int wake_fd) {
        items.clear();
        targets.clear();
        items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
        targets.push_back({nullptr, 0, socket_role::iopub, nullptr});
        for (auto& [id, k] : kernels) {
            auto add = [&](zmq::socket_t& s, std::uint64_t set_id, socket_role role) {
                if (s.handle() == nullptr) return;  // suspended
                items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
                targets.push_back({k.get(), set_id, role, &s});
            };
            add(k->iopub, 0, socket_role::iopub);
            add(k->hb, 0, socket_role::hb);
            for (auto& [set_id, set] : k->sets) {
                add(set.shell, set_id, socket_role::shell);
                add(set.control, set_id, socket_role::control);
                add(set.stdin_, set_id, socket_role::stdin_);
            }
        }
        dirty = false;
    }

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

    void service(const poll_target& t) {
        std::vector<std::string> frames;
        std::size_t bytes = 0;
        for (int n = 0; n < max_messages_per_turn && bytes < max_bytes_per_turn; ++n) {
            if (!receive(*t.socket, frames, bytes)) return;
            kernel_entry& k = *t.kernel;
            if (t.role == socket_role::hb) {
                if (k.handlers.on_heartbeat) k.handlers.on_heartbeat();
                continue;
            }
            auto decoded = protocol::decode(std::move(frames), *k.signer, limits);
            frames = {};
            if (!decoded) {
                ++dropped;
                if (k.handlers.on_dropped)
                    k.handlers.on_dropped(std::string(protocol::to_string(decoded.error)) +
                                          (decoded.detail.empty() ? "" : ": " + decoded.detail));
                continue;
            }
            ++received;
            auto m = std::make_shared<kernel_message>();
            m->chan = channel_of(t.role);
            m->msg = std::move(decoded.msg);
            m->msg.identities.clear();  // the iopub topic and routing ids stay here
            m->fields = std::move(decoded.fields);
            if (k.handlers.on_message) k.handlers.on_message(t.set_id, std::move(m));
        }
    }

    void send_frames(zmq::socket_t& s, const std::vector<std::string>& frames) {
        for (std::size_t i = 0; i < frames.size(); ++i) {
            const auto flags = (i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none) |
                               zmq::send_flags::dontwait;
            if (!s.send(zmq::buffer(frames[i]), flags)) {
                ++dropped;  // the kernel is not reading: a full queue drops, never blocks the reactor
                return;
            }
        }
        ++sent;
    }
};

zmq_reactor::zmq_reactor(protocol::decode_limits limits) : impl_(std::make_unique<impl>()) {
    impl_->limits = limits;
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw std::runtime_error("zmq_reactor: eventfd failed");
}

zmq_reactor::~zmq_reactor() {
    stop();
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

void zmq_reactor::run() {
    impl& r = *impl_;
    while (running_) {
        if (r.dirty) r.rebuild_poll_items(wake_fd_);
        try {
            zmq::poll(r.items.data(), r.items.size(), std::chrono::milliseconds(-1));
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR) continue;
            spdlog::error("zmq reactor: poll failed: {}", e.what());
            continue;
        }
        if (r.items[0].revents & ZMQ_POLLIN) {
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
            continue;  // sockets may have changed; rebuild before servicing
        }
        for (std::size_t i = 1; i < r.items.size(); ++i)
            if (r.items[i].revents & ZMQ_POLLIN) r.service(r.targets[i]);
    }
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
        r.kernels.erase(kernel_id);
        r.dirty = true;
    });
}

void zmq_reactor::suspend_kernel(const std::string& kernel_id) {
    post([kernel_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end()) return;
        auto& k = *it->second;
        k.iopub.close();
        k.hb.close();
        for (auto& [set_id, set] : k.sets) {
            set.shell.close();
            set.control.close();
            set.stdin_.close();
        }
        r.dirty = true;
    });
}

void zmq_reactor::open_channels(const std::string& kernel_id, std::uint64_t set_id) {
    post([kernel_id, set_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end() || it->second->sets.count(set_id) != 0) return;
        if (it->second->iopub.handle() == nullptr) {  // suspended: made on the next add_kernel
            it->second->sets.emplace(set_id, impl::channel_set{});
            return;
        }
        it->second->sets.emplace(set_id, r.make_set(*it->second));
        r.dirty = true;
    });
}

void zmq_reactor::close_channels(const std::string& kernel_id, std::uint64_t set_id) {
    post([kernel_id, set_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end()) return;
        it->second->sets.erase(set_id);
        r.dirty = true;
    });
}

void zmq_reactor::send(const std::string& kernel_id, std::uint64_t set_id, ws::channel chan,
                       protocol::message msg) {
    post([kernel_id, set_id, chan, msg = std::move(msg)](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end()) return;
        const auto set = it->second->sets.find(set_id);
        if (set == it->second->sets.end()) return;
        zmq::socket_t* s = chan == ws::channel::control ? &set->second.control
                           : chan == ws::channel::stdin_ ? &set->second.stdin_
                                                          : &set->second.shell;
        if (s->handle() == nullptr) {
            ++r.dropped;
            return;
        }
        r.send_frames(*s, protocol::encode(msg, *it->second->signer));
    });
}

void zmq_reactor::ping(const std::string& kernel_id) {
    post([kernel_id](impl& r) {
        const auto it = r.kernels.find(kernel_id);
        if (it == r.kernels.end() || it->second->hb.handle() == nullptr) return;
        (void)it->second->hb.send(zmq::str_buffer("ping"), zmq::send_flags::dontwait);
    });
}

zmq_reactor::stats zmq_reactor::counters() const {
    return {impl_->received.load(), impl_->sent.load(), impl_->dropped.load()};
}

}  // namespace cellgate::wire
