// The client sessions a kernel keeps (kernel.hpp): attaching a client's
// channel set, and dropping the one detached longest when there is no room;
// a detached session's messages buffered in arrival order within their
// bounds, then replayed when it comes back, or expired; and what a client
// sends, held back until the kernel is ready.
#include "kernels/kernel.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

namespace cellgate::kernels {

namespace {

std::atomic<std::uint64_t> next_set_id{kernel::gateway_set + 1};

std::size_t client_bytes(const messaging::client_message& m) {
    std::size_t n = m.header.size() + m.parent_header.size() + m.metadata.size() + m.content.size();
    for (const auto& b : m.buffers) n += b.size();
    return n;
}

}  // namespace

kernel::attach_result kernel::attach(const std::string& session_id, std::shared_ptr<kernel_subscriber> subscriber) {
    std::lock_guard lock(mutex_);
    attach_result r;
    if (!session_id.empty()) {
        for (auto& [set_id, s] : sessions_) {
            if (s.session_id != session_id) continue;
            if (auto previous = s.subscriber.lock()) {
                // A second connection with the same session id takes over;
                // the old one stops receiving (as jupyter_server does).
                previous->kernel_closed("replaced by a new connection with the same session_id");
            }
            s.subscriber = subscriber;
            r.set_id = set_id;
            r.replayed = s.buffer.size();
            r.replayed_bytes = s.buffered_bytes;
            for (const auto& m : s.buffer) subscriber->deliver(m);
            if (s.dropped > 0)
                subscriber->deliver(gateway_notice("[cellgate] " + std::to_string(s.dropped) +
                                                   " messages were dropped while this session was "
                                                   "disconnected (buffer full)\n"));
            s.buffer.clear();
            s.buffered_bytes = 0;
            s.dropped = 0;
            return r;
        }
    }
    if (sessions_.size() >= settings_.max_client_sessions && !evict_detached_locked()) return r;
    client_session s;
    s.session_id = session_id;
    s.set_id = next_set_id++;
    s.subscriber = subscriber;
    r.set_id = s.set_id;
    sessions_.emplace(s.set_id, std::move(s));
    reactor_.open_channels(id_, r.set_id);
    return r;
}

// Makes room for a new client session by dropping the one detached longest
// ago (its buffered output goes with it). False when every session is attached.
bool kernel::evict_detached_locked() {
    auto oldest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
        if (!it->second.attached() && (oldest == sessions_.end() || it->second.detached_at < oldest->second.detached_at))
            oldest = it;
    if (oldest == sessions_.end()) return false;
    spdlog::info("kernel {}: dropped a disconnected client session to make room ({} at most)", id_,
                 settings_.max_client_sessions);
    reactor_.close_channels(id_, oldest->first);
    sessions_.erase(oldest);
    return true;
}

void kernel::detach(std::uint64_t set_id, const kernel_subscriber* subscriber,
                    std::vector<messaging::kernel_message_ptr> unsent) {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(set_id);
    if (it == sessions_.end()) return;
    auto& s = it->second;
    if (const auto current = s.subscriber.lock(); current && current.get() != subscriber) {
        // A client that reconnects (JupyterLab does on a restart) can attach
        // its new socket before the old one's close is handled here: the
        // session is the new socket's now, and detaching it would leave the
        // client with a connection that never hears from its kernel.
        for (const auto& m : unsent) current->deliver(m);
        return;
    }
    if (s.session_id.empty()) {
        sessions_.erase(it);
        reactor_.close_channels(id_, set_id);
        return;
    }
    s.subscriber.reset();
    s.detached_at = steady::now();
    for (const auto& m : unsent) buffer_locked(s, m);
}

void kernel::requeue(std::uint64_t set_id, messaging::kernel_message_ptr m) {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(set_id);
    if (it == sessions_.end() || closed_) return;
    if (auto sub = it->second.subscriber.lock()) {
        sub->deliver(std::move(m));
        return;
    }
    if (!it->second.session_id.empty()) buffer_locked(it->second, m);
}

// Inserts in arrival order (usually at the end; handed-back messages go
// before anything that arrived after them) and enforces the bounds.
void kernel::buffer_locked(client_session& s, const messaging::kernel_message_ptr& m) {
    auto pos = s.buffer.end();
    while (pos != s.buffer.begin() && (*std::prev(pos))->seq > m->seq) --pos;
    if (pos != s.buffer.begin() && (*std::prev(pos))->seq == m->seq) return;  // already there
    s.buffer.insert(pos, m);
    s.buffered_bytes += m->wire_bytes();
    while (!s.buffer.empty() && (s.buffer.size() > settings_.session_buffer_messages ||
                                 s.buffered_bytes > settings_.session_buffer_bytes)) {
        s.buffered_bytes -= s.buffer.front()->wire_bytes();
        s.buffer.pop_front();
        ++s.dropped;
    }
}

void kernel::expire_sessions(steady::time_point now) {
    std::lock_guard lock(mutex_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (!it->second.attached() && now - it->second.detached_at > settings_.session_buffer_ttl) {
            reactor_.close_channels(id_, it->first);
            it = sessions_.erase(it);
        } else {
            ++it;
        }
    }
}

bool kernel::client_send(std::uint64_t set_id, messaging::client_message msg) {
    std::function<void()> wake;
    {
        std::lock_guard lock(mutex_);
        if (closed_) return false;
        if (ready_) {
            send_locked(set_id, std::move(msg));
            return true;
        }
        const auto bytes = client_bytes(msg);
        if (pending_.size() >= settings_.pending_messages || pending_bytes_ + bytes > settings_.pending_bytes)
            return false;
        pending_bytes_ += bytes;
        pending_.push_back({set_id, std::move(msg)});
        if (state_ == kernel_state::paused) wake = wanted_;
    }
    if (wake) wake();
    return true;
}

void kernel::send_locked(std::uint64_t set_id, messaging::client_message msg) {
    if (msg.msg_type == "execute_request") {
        ++metrics_.executions;
        if (set_id == gateway_set) watch_.own(msg.msg_id);
        else watch_.requested(msg.msg_id, set_id);
    }
    last_activity_ = std::chrono::system_clock::now();
    last_activity_wall_ = steady::now();
    protocol::message out;
    out.header = std::move(msg.header);
    out.parent_header = std::move(msg.parent_header);
    out.metadata = std::move(msg.metadata);
    out.content = std::move(msg.content);
    out.buffers = std::move(msg.buffers);
    reactor_.send(id_, set_id, msg.chan, std::move(out));
}

void kernel::flush_pending_locked() {
    while (!pending_.empty()) {
        auto p = std::move(pending_.front());
        pending_.pop_front();
        if (p.set_id == gateway_set || sessions_.count(p.set_id) != 0) send_locked(p.set_id, std::move(p.msg));
    }
    pending_bytes_ = 0;
}

void kernel::deliver_locked(client_session& s, const messaging::kernel_message_ptr& m) {
    if (auto sub = s.subscriber.lock()) {
        sub->deliver(m);
        return;
    }
    // Disconnected: keep it for the reconnect, within bounds (oldest go first).
    if (!s.session_id.empty()) buffer_locked(s, m);
}

}  // namespace cellgate::kernels
