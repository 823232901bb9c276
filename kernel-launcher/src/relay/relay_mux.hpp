#pragma once

#include "relay/relay_protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::launcher::relay {

struct mux_limits {
    std::size_t max_streams = 64;             // open connections per sandbox
    std::uint32_t window = window_bytes;      // per stream and direction
    std::size_t soft_queue_bytes = 1 << 20;   // above this nothing new is read for the sandbox
    std::size_t hard_queue_bytes = 64 << 20;  // a sandbox that never reads its input is ended
};

// The host side of the relay protocol, with no descriptors: bytes and events
// in, bytes and events out, so every rule can be tested on its own. The
// caller (host_relay) moves bytes between it and the sockets.
//
// Bounds: for each stream at most `window` bytes wait for the local client
// (the sandbox may not send more), and at most `window` bytes of the client's
// are in flight to the sandbox. The queue to the sandbox grows past
// soft_queue_bytes only by control frames, which are few per stream; credit
// is withheld while the queue is long, so a sandbox that stops reading stops
// receiving the right to send.
class relay_mux {
public:
    // `resumed`: the sandbox was restored from a checkpoint and this is its
    // new host side. The mux begins by sending reset, and skips what arrives
    // before the sandbox's next hello (the tail of what it was writing to the
    // old pipe when it was checkpointed).
    explicit relay_mux(mux_limits limits = {}, bool resumed = false);

    // Bytes read from the sandbox. False on a protocol violation; error() says
    // what, and the relay must end: nothing from this side is trusted after it.
    bool feed(std::string_view bytes);
    bool ready() const noexcept { return ready_; }
    bool failed() const noexcept { return !error_.empty(); }
    const std::string& error() const noexcept { return error_; }

    // A local client connected to `channel` (0 … 4). Returns the new stream's
    // id, or 0 when max_streams are open (close the connection).
    std::uint32_t open(int channel);
    // How many bytes may be read from the stream's local client now.
    std::size_t readable(std::uint32_t id) const;
    // Bytes the local client sent: at most readable(id).
    void local_data(std::uint32_t id, std::string_view bytes);
    // The local client hung up or failed; the sandbox is told.
    void local_closed(std::uint32_t id);

    // Bytes waiting for the stream's local client, and how many were written.
    std::string_view to_local(std::uint32_t id) const;
    void local_written(std::uint32_t id, std::size_t n);
    // Streams the sandbox ended whose bytes are all written: close their clients.
    std::vector<std::uint32_t> take_finished();

    // Bytes waiting for the sandbox, and how many were written.
    std::string_view to_sandbox() const noexcept;
    void sandbox_written(std::size_t n);

    bool has_stream(std::uint32_t id) const { return streams_.count(id) != 0; }
    std::size_t stream_count() const noexcept { return streams_.size(); }

private:
    struct stream {
        int channel = 0;
        std::uint32_t send_credit = 0;  // bytes we may still send the sandbox
        std::uint32_t recv_window = 0;  // bytes the sandbox may still send us
        std::uint32_t grant = 0;        // written to the client, not yet credited back
        std::string to_local;
        std::size_t to_local_offset = 0;
        bool remote_closed = false;     // the sandbox closed it: finish once written
    };

    bool fail(std::string why);
    // Drops input up to the hello frame (resumed); false while none is seen.
    bool skip_to_hello();
    bool on_frame(const frame_header& h, std::string_view payload);
    void grant_credit();
    void append(frame_type t, std::uint32_t id, std::string_view payload = {});

    mux_limits limits_;
    std::map<std::uint32_t, stream> streams_;
    std::uint32_t next_id_ = 1;
    std::string in_;             // bytes from the sandbox not yet a whole frame
    std::string out_;            // frames for the sandbox
    std::size_t out_offset_ = 0;
    bool hello_ = false;
    bool resyncing_ = false;     // resumed: skipping input until a hello
    bool ready_ = false;
    std::vector<std::uint32_t> finished_;
    std::string error_;
};

}  // namespace cellgate::launcher::relay
