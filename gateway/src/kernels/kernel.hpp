#pragma once

#include "cellgate/launcher/sandbox_info.hpp"
#include "kernels/cell_watch.hpp"
#include "kernels/policy.hpp"
#include "kernels/kernel_subscriber.hpp"
#include "metrics/metrics.hpp"
#include "messaging/ws_codec.hpp"
#include "wire/zmq_reactor.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::kernels {

enum class kernel_state { starting, idle, busy, restarting, dead, terminating, paused };
std::string_view to_string(kernel_state s) noexcept;

class kernel;

struct kernel_settings {
    // Per client session (WebSocket session_id): what is kept while it is
    // disconnected, replayed when it reconnects.
    std::size_t session_buffer_messages = 10000;
    std::size_t session_buffer_bytes = 64u << 20;
    std::chrono::seconds session_buffer_ttl{600};
    // Client sessions (attached or kept for a reconnect) per kernel: each
    // holds three ZMQ sockets. Past it the oldest detached one is dropped;
    // when every one is attached, a new connection is refused.
    std::size_t max_client_sessions = 32;
    // Messages a client sends before the kernel is ready are queued, not dropped.
    std::size_t pending_messages = 1000;
    std::size_t pending_bytes = 64u << 20;
    // IOPub rate limit (0 = off). By default it withholds only stream output;
    // rich outputs (plots, tables) pass unless limit_rich_outputs is set.
    double iopub_msg_rate = 0;        // messages per second
    double iopub_data_rate = 0;       // bytes per second
    std::chrono::milliseconds rate_window{3000};
    bool limit_rich_outputs = false;
    // Where the cells a kernel runs for others than the agent service go
    // (cell_summary.hpp: a Jupyter WebSocket client's, an E2B code
    // context's): the ledger (main.cpp). Called outside the kernel's lock,
    // on the thread that saw the cell start or end; it must not block.
    std::function<void(const kernel&, cell_summary)> on_cell;
};

using steady = std::chrono::steady_clock;

// A WebSocket session_id is the client's name for its stream of messages
// (jupyter_server's clients send a UUID): at most this long, printable ASCII.
inline constexpr std::size_t max_session_id_bytes = 128;
inline bool valid_session_id(std::string_view id) noexcept {
    if (id.size() > max_session_id_bytes) return false;
    for (const char c : id)
        if (c < 0x21 || c > 0x7e) return false;
    return true;
}

// One kernel: its sandbox, its state, and the client sessions attached to it.
// Thread-safe: the reactor thread delivers kernel messages, HTTP/WebSocket
// threads attach, detach and send, the manager changes the lifecycle.
class kernel : public std::enable_shared_from_this<kernel> {
public:
    static constexpr std::uint64_t gateway_set = 1;  // the gateway's own channel set

    kernel(std::string id, std::string spec_name, std::string tenant, wire::zmq_reactor& reactor,
           const kernel_settings& settings, metrics::registry& metrics);
    ~kernel();

    const std::string& id() const noexcept { return id_; }
    const std::string& spec_name() const noexcept { return spec_name_; }
    const std::string& tenant() const noexcept { return tenant_; }
    // A warm-pool kernel gets its owner when claimed, before anyone else can
    // see it (so the unlocked reads above stay safe).
    void assign_tenant(std::string tenant) { tenant_ = std::move(tenant); }
    // Runs code on the gateway's own channel set without output or history
    // (e.g. setting a claimed kernel's environment) and calls back with the
    // execute_reply's content (null if the kernel went away).
    // `user_expressions` are evaluated after it, their values in the reply.
    void run_silent(const std::string& code, std::function<void(const nlohmann::json&)> done,
                    nlohmann::json user_expressions = nlohmann::json::object());
    // The limits the session runs under: a copy, read under the lock, since
    // the core may change them on a live session (its lifetime: see
    // kernel_manager::extend_life), while the reactor reads them for each
    // message.
    kernel_policy policy() const {
        std::lock_guard lock(mutex_);
        return policy_;
    }
    void set_policy(const kernel_policy& p) {
        std::lock_guard lock(mutex_);
        policy_ = p;
    }
    // Changes a live session's policy in place, under the lock (a read and
    // a set_policy could lose a change made between them).
    template <class Change>
    void change_policy(Change change) {
        std::lock_guard lock(mutex_);
        change(policy_);
    }
    // The time limit of the cell a client runs over the WebSocket (see
    // cell_watch.hpp): tells every client when it is passed and says what
    // the manager must do (interrupt, or restart `grace` after that).
    cell_watch::action enforce_time_limit(steady::time_point now, steady::duration grace);
    // A cell that ran in this session outside the kernel (an E2B code
    // context's) goes to the ledger as the kernel's own cells do. Call it
    // without holding a lock the hook could need.
    void report_cell(cell_summary s) const;
    std::chrono::system_clock::time_point created() const noexcept { return created_; }
    steady::time_point created_steady() const noexcept { return created_steady_; }
    // Counts as activity for idle culling (executions, file operations).
    void touch();
    std::chrono::system_clock::time_point last_activity_time() const;
    // A kernel taken back after a gateway restart keeps its age and idleness
    // (for lifetime and culling). Called before anyone else can see it.
    void restore_times(std::chrono::system_clock::time_point created,
                       std::chrono::system_clock::time_point last_activity);
    // Where the readiness nudge goes. A kernel taken back may be running a
    // cell, which holds its shell queue; ipykernel answers kernel_info on
    // control at any time.
    void nudge_on_control(bool on);

    // --- lifecycle, called by the manager
    // Binds (or re-binds after a restart) the ZMQ sockets to this sandbox and
    // starts the nudge: kernel_info_request until both a reply and an iopub
    // message arrive, so iopub is known to be subscribed before client
    // messages flow.
    void connect(launcher::sandbox_info sandbox);
    std::optional<launcher::sandbox_info> sandbox() const;
    // Sends the next nudge if still needed; true once ready.
    bool nudge();
    bool ready() const;
    void set_state(kernel_state s);
    kernel_state state() const;
    // Synthesises an iopub status message ("restarting", "dead") to every session.
    // `reason` (for "dead") goes to every client: as a stderr notice, and in
    // the status content as "cellgate_reason", which the agent API reports.
    void broadcast_status(std::string_view execution_state, std::string_view reason = {});
    void heartbeat_seen();
    steady::time_point last_heartbeat() const;
    // Closes every attached client (the kernel is gone) and stops its sockets.
    void close(const std::string& reason);

    // --- client sessions
    // Attaches a subscriber under `session_id` ("" = a one-off session that is
    // not buffered when it leaves). Replays what was buffered for it. A set id
    // of 0 means refused: the kernel has max_client_sessions attached.
    struct attach_result {
        std::uint64_t set_id = 0;
        std::size_t replayed = 0;
        std::size_t replayed_bytes = 0;
    };
    attach_result attach(const std::string& session_id, std::shared_ptr<kernel_subscriber> subscriber);
    // `unsent` holds messages that were queued to the subscriber but never
    // written (a slow client being cut off); they go back to the front of the
    // session's buffer so a reconnect loses nothing. Only `subscriber` itself
    // lets go: when a newer connection with the same session id has taken
    // the session over, it stays attached and gets `unsent`.
    void detach(std::uint64_t set_id, const kernel_subscriber* subscriber,
                std::vector<messaging::kernel_message_ptr> unsent = {});
    // A message that reached a subscriber after it detached (it was already
    // on its way): back into the session's buffer in arrival order, or to the
    // session's new subscriber if it has reconnected meanwhile.
    void requeue(std::uint64_t set_id, messaging::kernel_message_ptr m);
    // False when the kernel is not ready and its queue is full.
    bool client_send(std::uint64_t set_id, messaging::client_message msg);
    // Observers see every iopub message and every reply on the gateway set.
    void add_observer(const std::shared_ptr<kernel_subscriber>& observer);
    // Sends a message on the gateway's own channel set.
    void gateway_send(messaging::channel chan, protocol::message msg);

    nlohmann::json model() const;

    // --- pause and resume (kernel_manager_pause.cpp)
    // What the last pause kept and the last resume brought back, for the
    // session model ("cellgate" → "pause" in the kernel model).
    struct pause_state {
        std::string mode;          // "memory" (its memory is saved) or "files"; empty: not paused
        std::chrono::system_clock::time_point since{};
        std::uint64_t image_bytes = 0;
        std::string resumed_from;  // the last resume: "memory" (the same kernel), "files" (a new one)
        std::string failed;        // the last resume failed: why (the session stays paused)
        std::uint64_t pauses = 0;
    };
    pause_state pause_info() const;
    void set_pause_info(pause_state p);
    nlohmann::json pause_model() const;
    // Where a session started from, when not from nothing: {"snapshot",
    // "source", "mode"} for one started from a snapshot or a fork; null else.
    void set_origin(nlohmann::json origin);
    nlohmann::json origin() const;
    // Called (outside the lock) whenever a client's message waits on a paused
    // kernel: the manager resumes it when its policy says so.
    void on_wanted(std::function<void()> f);
    // Client messages wait for the kernel (it is not ready).
    bool has_waiting_messages() const;
    // What a client did last (requests, file operations), for idle culling;
    // what the kernel sends does not count (review L13).
    steady::time_point last_activity() const;
    // A cell a client or the gateway asked for is running (cell_watch.hpp).
    bool serving_request() const;
    int connections() const;
    const nlohmann::json& kernel_info() const { return kernel_info_; }

    // Drops detached sessions whose buffer outlived its TTL.
    void expire_sessions(steady::time_point now);

private:
    struct client_session {
        std::string session_id;
        std::uint64_t set_id = 0;
        std::weak_ptr<kernel_subscriber> subscriber;
        std::deque<messaging::kernel_message_ptr> buffer;
        std::size_t buffered_bytes = 0;
        std::uint64_t dropped = 0;
        steady::time_point detached_at;
        bool attached() const { return !subscriber.expired(); }
    };
    struct pending_message {
        std::uint64_t set_id;
        messaging::client_message msg;
    };

    void on_wire_message(std::uint64_t set_id, std::shared_ptr<messaging::kernel_message> m);
    void on_wire_message_locked(std::unique_lock<std::mutex>& lock, std::uint64_t set_id,
                                std::shared_ptr<messaging::kernel_message> m);
    // Hands the cells that started or ended to settings_.on_cell: taken under
    // the lock, reported after it is released.
    void report_cells(std::vector<cell_summary> cells) const;
    void buffer_locked(client_session& s, const messaging::kernel_message_ptr& m);
    bool evict_detached_locked();
    void fan_out_locked(const messaging::kernel_message_ptr& m);
    void deliver_locked(client_session& s, const messaging::kernel_message_ptr& m);
    bool rate_limited_locked(const messaging::kernel_message& m);
    void send_locked(std::uint64_t set_id, messaging::client_message msg);
    void flush_pending_locked();
    // Both must be called with the lock held (they take the next sequence number).
    messaging::kernel_message_ptr synthesize_status(std::string_view execution_state, std::string_view reason = {});
    messaging::kernel_message_ptr gateway_notice(std::string_view text);
    // Numbers a message the gateway made up and sends it to every client.
    void fan_out_made_locked(cell_watch::made_message m);

    const std::string id_, spec_name_;
    std::string tenant_;
    std::map<std::string, std::function<void(const nlohmann::json&)>> silent_waiters_;
    kernel_policy policy_;
    cell_watch watch_;  // under mutex_
    std::chrono::system_clock::time_point created_ = std::chrono::system_clock::now();
    steady::time_point created_steady_ = steady::now();
    bool nudge_on_control_ = false;
    wire::zmq_reactor& reactor_;
    const kernel_settings settings_;
    metrics::registry& metrics_;

    mutable std::mutex mutex_;
    std::optional<launcher::sandbox_info> sandbox_;
    kernel_state state_ = kernel_state::starting;
    bool ready_ = false;
    bool iopub_seen_ = false;
    std::string nudge_msg_id_;
    nlohmann::json kernel_info_;
    std::map<std::uint64_t, client_session> sessions_;  // by set id
    std::deque<pending_message> pending_;
    std::size_t pending_bytes_ = 0;
    std::vector<std::weak_ptr<kernel_subscriber>> observers_;
    steady::time_point last_activity_wall_;
    std::chrono::system_clock::time_point last_activity_;
    steady::time_point last_heartbeat_;
    // rate limit window
    steady::time_point window_start_;
    double window_msgs_ = 0, window_bytes_ = 0;
    bool limiting_ = false;
    bool closed_ = false;
    std::uint64_t next_seq_ = 1;
    pause_state pause_;
    nlohmann::json origin_;
    std::function<void()> wanted_;
    nlohmann::json pause_json_locked() const;
};

using kernel_ptr = std::shared_ptr<kernel>;

std::string iso8601(std::chrono::system_clock::time_point t);

}  // namespace cellgate::kernels
