#include "relay/relay_mux.hpp"

#include <algorithm>
#include <limits>

namespace cellgate::launcher::relay {

relay_mux::relay_mux(mux_limits limits, bool resumed) : limits_(limits), resyncing_(resumed) {
    if (resumed) append(frame_type::reset, 0);
}

bool relay_mux::skip_to_hello() {
    std::string hello;
    append_frame(hello, frame_type::hello, 0, hello_payload);
    const auto at = in_.find(hello);
    if (at == std::string::npos) {
        // Keep only what could still be the start of a hello; what came
        // before it is bounded by the old pipe's capacity, never held.
        if (in_.size() >= hello.size()) in_.erase(0, in_.size() - (hello.size() - 1));
        return false;
    }
    in_.erase(0, at);
    resyncing_ = false;
    return true;
}

bool relay_mux::fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
}

void relay_mux::append(frame_type t, std::uint32_t id, std::string_view payload) {
    append_frame(out_, t, id, payload);
    if (out_.size() - out_offset_ > limits_.hard_queue_bytes)
        fail("the sandbox side has not read its input for " + std::to_string(limits_.hard_queue_bytes) +
             " bytes");
}

bool relay_mux::feed(std::string_view bytes) {
    if (failed()) return false;
    in_.append(bytes);
    if (resyncing_ && !skip_to_hello()) return true;
    std::size_t pos = 0;
    while (in_.size() - pos >= header_bytes) {
        frame_header h;
        if (auto bad = parse_header(std::string_view(in_).substr(pos, header_bytes), h)) return fail(*bad);
        if (in_.size() - pos - header_bytes < h.length) break;
        const auto payload = std::string_view(in_).substr(pos + header_bytes, h.length);
        pos += header_bytes + h.length;
        if (!on_frame(h, payload)) return false;
    }
    in_.erase(0, pos);
    return true;
}

bool relay_mux::on_frame(const frame_header& h, std::string_view payload) {
    if (!hello_) {
        if (h.type != frame_type::hello || payload != hello_payload)
            return fail("the sandbox side did not begin with hello (got " + std::string(to_string(h.type)) + ")");
        hello_ = true;
        return true;
    }
    switch (h.type) {
    case frame_type::hello: return fail("a second hello");
    case frame_type::ready:
        if (ready_) return fail("a second ready");
        ready_ = true;
        return true;
    case frame_type::open: return fail("the sandbox side may not open streams");
    default: break;
    }
    if (h.stream >= next_id_)
        return fail(std::string(to_string(h.type)) + " for stream " + std::to_string(h.stream) +
                    ", which was never opened");
    const auto it = streams_.find(h.stream);
    if (it == streams_.end() || it->second.remote_closed) return true;  // closed here: late frames are dropped
    stream& s = it->second;
    switch (h.type) {
    case frame_type::data:
        if (payload.size() > s.recv_window)
            return fail("data beyond the window on stream " + std::to_string(h.stream));
        s.recv_window -= static_cast<std::uint32_t>(payload.size());
        if (s.to_local_offset > 0 && s.to_local_offset == s.to_local.size()) {
            s.to_local.clear();
            s.to_local_offset = 0;
        }
        s.to_local.append(payload);
        return true;
    case frame_type::credit: {
        const auto n = read_u32(payload);
        if (n == 0 || n > limits_.window - s.send_credit)
            return fail("credit of " + std::to_string(n) + " beyond the window on stream " +
                        std::to_string(h.stream));
        s.send_credit += n;
        return true;
    }
    case frame_type::close:
        s.remote_closed = true;
        if (s.to_local_offset == s.to_local.size()) {
            finished_.push_back(h.stream);
            streams_.erase(it);
        }
        return true;
    default: return true;
    }
}

std::uint32_t relay_mux::open(int channel) {
    if (failed() || channel < 0 || channel >= channel_count) return 0;
    if (streams_.size() >= limits_.max_streams || next_id_ == std::numeric_limits<std::uint32_t>::max())
        return 0;
    const auto id = next_id_++;
    stream s;
    s.channel = channel;
    s.send_credit = limits_.window;
    s.recv_window = limits_.window;
    streams_.emplace(id, std::move(s));
    const char c = static_cast<char>(channel);
    append(frame_type::open, id, std::string_view(&c, 1));
    return id;
}

std::size_t relay_mux::readable(std::uint32_t id) const {
    if (failed() || out_.size() - out_offset_ >= limits_.soft_queue_bytes) return 0;
    const auto it = streams_.find(id);
    if (it == streams_.end() || it->second.remote_closed) return 0;
    return std::min<std::size_t>(it->second.send_credit, max_data_bytes);
}

void relay_mux::local_data(std::uint32_t id, std::string_view bytes) {
    const auto it = streams_.find(id);
    if (failed() || it == streams_.end() || it->second.remote_closed) return;
    stream& s = it->second;
    bytes = bytes.substr(0, s.send_credit);  // callers read at most readable(id)
    while (!bytes.empty()) {
        const auto piece = bytes.substr(0, max_data_bytes);
        append(frame_type::data, id, piece);
        s.send_credit -= static_cast<std::uint32_t>(piece.size());
        bytes.remove_prefix(piece.size());
    }
}

void relay_mux::local_closed(std::uint32_t id) {
    const auto it = streams_.find(id);
    if (it == streams_.end()) return;
    if (!it->second.remote_closed && !failed()) append(frame_type::close, id);
    streams_.erase(it);
}

std::string_view relay_mux::to_local(std::uint32_t id) const {
    const auto it = streams_.find(id);
    if (it == streams_.end()) return {};
    return std::string_view(it->second.to_local).substr(it->second.to_local_offset);
}

void relay_mux::local_written(std::uint32_t id, std::size_t n) {
    const auto it = streams_.find(id);
    if (it == streams_.end()) return;
    stream& s = it->second;
    n = std::min(n, s.to_local.size() - s.to_local_offset);
    s.to_local_offset += n;
    s.grant += static_cast<std::uint32_t>(n);
    if (s.to_local_offset == s.to_local.size()) {
        s.to_local.clear();
        s.to_local_offset = 0;
        if (s.remote_closed) {
            finished_.push_back(id);
            streams_.erase(it);
            return;
        }
    }
    grant_credit();
}

void relay_mux::grant_credit() {
    if (failed() || out_.size() - out_offset_ >= limits_.soft_queue_bytes) return;
    for (auto& [id, s] : streams_) {
        if (s.grant == 0 || s.remote_closed) continue;
        // Batched, so a stream of small messages does not cost a frame each way.
        if (s.grant < limits_.window / 4 && s.to_local_offset < s.to_local.size()) continue;
        append_credit(out_, id, s.grant);
        s.recv_window += s.grant;
        s.grant = 0;
    }
}

std::vector<std::uint32_t> relay_mux::take_finished() {
    std::vector<std::uint32_t> out;
    out.swap(finished_);
    return out;
}

std::string_view relay_mux::to_sandbox() const noexcept { return std::string_view(out_).substr(out_offset_); }

void relay_mux::sandbox_written(std::size_t n) {
    out_offset_ += std::min(n, out_.size() - out_offset_);
    if (out_offset_ == out_.size()) {
        out_.clear();
        out_offset_ = 0;
    } else if (out_offset_ > (1u << 20) && out_offset_ > out_.size() / 2) {
        out_.erase(0, out_offset_);
        out_offset_ = 0;
    }
    grant_credit();
}

}  // namespace cellgate::launcher::relay
