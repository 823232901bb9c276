#include "kernels/kernel.hpp"
#include "util/log_limiter.hpp"
#include "util/log_safe.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <ctime>

namespace cellgate::kernels {

namespace {

bool is_rich_output(const std::string& msg_type) {
    return msg_type == "display_data" || msg_type == "execute_result" || msg_type == "update_display_data";
}

}  // namespace

std::string_view to_string(kernel_state s) noexcept {
    switch (s) {
    case kernel_state::starting: return "starting";
    case kernel_state::idle: return "idle";
    case kernel_state::busy: return "busy";
    case kernel_state::restarting: return "restarting";
    case kernel_state::dead: return "dead";
    case kernel_state::terminating: return "terminating";
    case kernel_state::paused: return "paused";
    }
    return "unknown";
}

std::string iso8601(std::chrono::system_clock::time_point t) {
    using namespace std::chrono;
    const auto micros = duration_cast<microseconds>(t.time_since_epoch()).count() % 1000000;
    const std::time_t secs = system_clock::to_time_t(t);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(micros));
    return buf;
}

kernel::kernel(std::string id, std::string spec_name, std::string tenant, wire::zmq_reactor& reactor,
               const kernel_settings& settings, metrics::registry& metrics)
    : id_(std::move(id)), spec_name_(std::move(spec_name)), tenant_(std::move(tenant)), reactor_(reactor),
      settings_(settings), metrics_(metrics), last_activity_wall_(steady::now()),
      last_activity_(std::chrono::system_clock::now()), last_heartbeat_(steady::now()),
      window_start_(steady::now()) {}

kernel::~kernel() = default;

void kernel::connect(launcher::sandbox_info sandbox) {
    std::weak_ptr<kernel> weak = weak_from_this();
    wire::zmq_reactor::kernel_handlers handlers;
    handlers.on_message = [weak](std::uint64_t set_id, std::shared_ptr<messaging::kernel_message> m) {
        if (auto self = weak.lock()) self->on_wire_message(set_id, std::move(m));
    };
    // A kernel chooses how often this runs (tiny unsigned messages cost it
    // nothing): counted per kernel, logged a few times and then summarised (M6).
    auto drops = std::make_shared<util::log_limiter>(5, std::chrono::seconds(10));
    handlers.on_dropped = [weak, this_id = id_, drops](const std::string& reason) {
        if (auto self = weak.lock()) {
            ++self->metrics_.kernel_messages_dropped;
            self->metrics_.count_kernel_drop(this_id);
        }
        const auto d = drops->note(util::log_limiter::clock::now());
        if (d.suppressed > 0)
            spdlog::warn("kernel {}: dropped {} more messages from the kernel in the last {} s ({} in all)", this_id,
                         d.suppressed, std::chrono::duration_cast<std::chrono::seconds>(drops->interval()).count(),
                         drops->total());
        if (d.log) spdlog::warn("kernel {}: dropped a message from the kernel: {}", this_id, util::log_safe(reason));
    };
    handlers.on_heartbeat = [weak] {
        if (auto self = weak.lock()) self->heartbeat_seen();
    };
    std::vector<std::uint64_t> set_ids;
    std::vector<cell_summary> cells;
    launcher::kernel_endpoints endpoints = sandbox.endpoints;
    {
        std::lock_guard lock(mutex_);
        sandbox_ = std::move(sandbox);
        ready_ = false;
        iopub_seen_ = false;
        nudge_msg_id_.clear();
        kernel_info_ = nullptr;
        watch_.reset(steady::now());  // a new process: whatever ran is gone
        cells = watch_.take_reports(steady::now());
        last_heartbeat_ = steady::now();
        for (const auto& [set_id, s] : sessions_) set_ids.push_back(set_id);
    }
    report_cells(std::move(cells));
    reactor_.add_kernel(id_, endpoints, std::move(handlers));
    reactor_.open_channels(id_, gateway_set);
    for (auto set_id : set_ids) reactor_.open_channels(id_, set_id);
}

std::optional<launcher::sandbox_info> kernel::sandbox() const {
    std::lock_guard lock(mutex_);
    return sandbox_;
}

bool kernel::nudge() {
    std::lock_guard lock(mutex_);
    if (ready_ || closed_) return ready_;
    auto msg = protocol::make_message("kernel_info_request", nlohmann::json::object(), "cellgate-gateway-" + id_);
    nudge_msg_id_ = nlohmann::json::parse(msg.header).at("msg_id").get<std::string>();
    reactor_.send(id_, gateway_set, nudge_on_control_ ? messaging::channel::control : messaging::channel::shell, std::move(msg));
    return false;
}

bool kernel::ready() const {
    std::lock_guard lock(mutex_);
    return ready_;
}

void kernel::set_state(kernel_state s) {
    std::lock_guard lock(mutex_);
    state_ = s;
    // From here until the next connect() client messages wait in the queue:
    // the old sandbox is going and the new one has other keys.
    if (s == kernel_state::restarting || s == kernel_state::dead || s == kernel_state::terminating ||
        s == kernel_state::paused)
        ready_ = false;
}

kernel_state kernel::state() const {
    std::lock_guard lock(mutex_);
    return state_;
}

void kernel::heartbeat_seen() {
    std::vector<cell_summary> cells;
    {
        std::lock_guard lock(mutex_);
        last_heartbeat_ = steady::now();
        // A cell whose reply never came ends here at the latest (cell_watch::reply_wait).
        cells = watch_.take_reports(last_heartbeat_);
    }
    report_cells(std::move(cells));
}

void kernel::report_cells(std::vector<cell_summary> cells) const {
    if (!settings_.on_cell) return;
    for (auto& c : cells) report_cell(std::move(c));
}

void kernel::report_cell(cell_summary s) const {
    if (!settings_.on_cell) return;
    try {
        settings_.on_cell(*this, std::move(s));
    } catch (const std::exception& e) {
        spdlog::warn("kernel {}: a cell was not recorded: {}", id_, e.what());
    }
}

steady::time_point kernel::last_heartbeat() const {
    std::lock_guard lock(mutex_);
    return last_heartbeat_;
}

messaging::kernel_message_ptr kernel::synthesize_status(std::string_view execution_state, std::string_view reason) {
    nlohmann::json content = {{"execution_state", execution_state}};
    if (!reason.empty()) content["cellgate_reason"] = reason;
    auto m = messaging::make_gateway_message(messaging::channel::iopub, "status", content, "cellgate-gateway-" + id_);
    m->seq = next_seq_++;
    return m;
}

messaging::kernel_message_ptr kernel::gateway_notice(std::string_view text) {
    auto m = messaging::make_gateway_message(messaging::channel::iopub, "stream", {{"name", "stderr"}, {"text", text}},
                                           "cellgate-gateway-" + id_);
    m->seq = next_seq_++;
    return m;
}

void kernel::fan_out_made_locked(cell_watch::made_message m) {
    m->seq = next_seq_++;
    fan_out_locked(m);
}

cell_watch::action kernel::enforce_time_limit(steady::time_point now, steady::duration grace) {
    std::lock_guard lock(mutex_);
    if (closed_) return cell_watch::action::none;
    auto o = watch_.check(policy_, now, grace);
    if (o.what == cell_watch::action::none) return o.what;
    fan_out_made_locked(std::move(o.notice));
    if (o.what == cell_watch::action::restart) {
        // The kernel never answers this cell now: its clients get the error
        // and the reply from here, before the restart's status messages.
        fan_out_made_locked(std::move(o.error));
        o.reply->seq = next_seq_++;
        if (const auto it = sessions_.find(o.set_id); it != sessions_.end()) deliver_locked(it->second, o.reply);
        // Its summary waits for the next report (the restart's connect): the
        // manager holds its own lock around this call.
        watch_.reset(now);
    }
    return o.what;
}

void kernel::broadcast_status(std::string_view execution_state, std::string_view reason) {
    std::lock_guard lock(mutex_);
    if (!reason.empty())
        fan_out_locked(gateway_notice("[cellgate] The kernel died: " + std::string(reason) + ".\n"));
    fan_out_locked(synthesize_status(execution_state, reason));
}

void kernel::close(const std::string& reason) {
    std::vector<std::shared_ptr<kernel_subscriber>> subscribers;
    std::map<std::string, std::function<void(const nlohmann::json&)>> waiters;
    {
        std::lock_guard lock(mutex_);
        if (closed_) return;
        closed_ = true;
        for (auto& [set_id, s] : sessions_)
            if (auto sub = s.subscriber.lock()) subscribers.push_back(std::move(sub));
        for (auto& o : observers_)
            if (auto sub = o.lock()) subscribers.push_back(std::move(sub));
        sessions_.clear();
        observers_.clear();
        pending_.clear();
        waiters.swap(silent_waiters_);
    }
    for (auto& [id, done] : waiters) done(nullptr);
    reactor_.remove_kernel(id_);
    for (auto& sub : subscribers) sub->kernel_closed(reason);
}

kernel::pause_state kernel::pause_info() const {
    std::lock_guard lock(mutex_);
    return pause_;
}

void kernel::set_pause_info(pause_state p) {
    std::lock_guard lock(mutex_);
    pause_ = std::move(p);
}

void kernel::set_origin(nlohmann::json origin) {
    std::lock_guard lock(mutex_);
    origin_ = std::move(origin);
}

nlohmann::json kernel::origin() const {
    std::lock_guard lock(mutex_);
    return origin_;
}

nlohmann::json kernel::pause_model() const {
    std::lock_guard lock(mutex_);
    return pause_json_locked();
}

nlohmann::json kernel::pause_json_locked() const {
    nlohmann::json m = {{"paused", !pause_.mode.empty()},
                        {"mode", pause_.mode.empty() ? nlohmann::json(nullptr) : nlohmann::json(pause_.mode)},
                        {"since", pause_.mode.empty() ? nlohmann::json(nullptr) : nlohmann::json(iso8601(pause_.since))},
                        {"image_bytes", pause_.image_bytes},
                        {"resumed_from", pause_.resumed_from.empty() ? nlohmann::json(nullptr)
                                                                     : nlohmann::json(pause_.resumed_from)},
                        {"pauses", pause_.pauses}};
    if (!pause_.failed.empty()) m["resume_failed"] = pause_.failed;
    return m;
}

bool kernel::has_waiting_messages() const {
    std::lock_guard lock(mutex_);
    return !pending_.empty();
}

void kernel::on_wanted(std::function<void()> f) {
    std::lock_guard lock(mutex_);
    wanted_ = std::move(f);
}

void kernel::add_observer(const std::shared_ptr<kernel_subscriber>& observer) {
    std::lock_guard lock(mutex_);
    std::erase_if(observers_, [](const auto& w) { return w.expired(); });
    observers_.push_back(observer);
}

void kernel::gateway_send(messaging::channel chan, protocol::message msg) {
    messaging::client_message m;
    m.chan = chan;
    const auto header = nlohmann::json::parse(msg.header, nullptr, false);
    if (header.is_object()) {
        m.msg_type = header.value("msg_type", "");
        m.msg_id = header.value("msg_id", "");
    }
    m.header = std::move(msg.header);
    m.parent_header = std::move(msg.parent_header);
    m.metadata = std::move(msg.metadata);
    m.content = std::move(msg.content);
    m.buffers = std::move(msg.buffers);
    client_send(gateway_set, std::move(m));
}

void kernel::on_wire_message(std::uint64_t set_id, std::shared_ptr<messaging::kernel_message> arrived) {
    std::vector<cell_summary> cells;
    {
        std::unique_lock lock(mutex_);
        on_wire_message_locked(lock, set_id, std::move(arrived));
        if (lock.owns_lock()) cells = watch_.take_reports(steady::now());
    }
    report_cells(std::move(cells));
}

void kernel::on_wire_message_locked(std::unique_lock<std::mutex>& lock, std::uint64_t set_id,
                                    std::shared_ptr<messaging::kernel_message> arrived) {
    if (closed_) return;
    if (set_id == gateway_set && arrived->fields.msg_type == "execute_reply") {
        if (const auto w = silent_waiters_.find(arrived->fields.parent_msg_id); w != silent_waiters_.end()) {
            auto done = std::move(w->second);
            silent_waiters_.erase(w);
            lock.unlock();  // the callback may call back into this kernel
            done(nlohmann::json::parse(arrived->msg.content, nullptr, false));
            return;
        }
    }
    arrived->seq = next_seq_++;
    const messaging::kernel_message_ptr m = std::move(arrived);
    if (set_id == 0) {
        if (!ready_ && !nudge_msg_id_.empty()) iopub_seen_ = true;
        std::string s;  // a status message's execution_state
        if (m->fields.msg_type == "status") {
            const auto content = nlohmann::json::parse(m->msg.content, nullptr, false);
            s = content.is_object() ? content.value("execution_state", "") : "";
            if (state_ != kernel_state::restarting && state_ != kernel_state::terminating &&
                state_ != kernel_state::dead) {
                if (s == "busy") state_ = kernel_state::busy;
                else if (s == "idle") state_ = kernel_state::idle;
                else if (s == "starting") state_ = kernel_state::starting;
            }
        } else {
            last_activity_ = std::chrono::system_clock::now();  // the model's, not culling's (L13)
        }
        auto verdict = watch_.on_iopub(*m, s, policy_, steady::now());
        for (auto& made : verdict.before) fan_out_made_locked(std::move(made));
        if (!verdict.deliver) {
            ++metrics_.cell_output_withheld;
            return;
        }
        if (rate_limited_locked(*m)) return;
        fan_out_locked(m);
        return;
    }
    if (set_id == gateway_set) {
        if (!ready_ && m->fields.msg_type == "kernel_info_reply") {
            kernel_info_ = nlohmann::json::parse(m->msg.content, nullptr, false);
        }
        for (auto& o : observers_)
            if (auto sub = o.lock()) sub->deliver(m);
        if (!ready_ && iopub_seen_ && kernel_info_.is_object()) {
            ready_ = true;
            if (state_ == kernel_state::starting || state_ == kernel_state::restarting) state_ = kernel_state::idle;
            flush_pending_locked();
        }
        return;
    }
    // A client's reply: its status ends the cell it answers (cell_watch).
    if (m->chan == messaging::channel::shell && m->fields.msg_type == "execute_reply") watch_.on_reply(*m);
    const auto it = sessions_.find(set_id);
    if (it != sessions_.end()) deliver_locked(it->second, m);
}

void kernel::fan_out_locked(const messaging::kernel_message_ptr& m) {
    for (auto& [set_id, s] : sessions_) deliver_locked(s, m);
    for (auto& o : observers_)
        if (auto sub = o.lock()) sub->deliver(m);
}

bool kernel::rate_limited_locked(const messaging::kernel_message& m) {
    if (settings_.iopub_msg_rate <= 0 && settings_.iopub_data_rate <= 0) return false;
    const auto& type = m.fields.msg_type;
    if (type == "status" || (!settings_.limit_rich_outputs && is_rich_output(type)) ||
        (type != "stream" && !is_rich_output(type)))
        return false;
    const auto now = steady::now();
    const double window_s = std::chrono::duration<double>(settings_.rate_window).count();
    if (now - window_start_ > settings_.rate_window) {
        const bool was_limiting = limiting_;
        window_start_ = now;
        window_msgs_ = window_bytes_ = 0;
        limiting_ = false;
        if (was_limiting)
            fan_out_locked(gateway_notice("[cellgate] IOPub output resumed after the rate limit.\n"));
    }
    window_msgs_ += 1;
    window_bytes_ += static_cast<double>(m.wire_bytes());
    const bool over = (settings_.iopub_msg_rate > 0 && window_msgs_ / window_s > settings_.iopub_msg_rate) ||
                      (settings_.iopub_data_rate > 0 && window_bytes_ / window_s > settings_.iopub_data_rate);
    if (!over) return false;
    ++metrics_.iopub_rate_limited;
    if (!limiting_) {
        limiting_ = true;
        fan_out_locked(gateway_notice(
            "[cellgate] IOPub output rate exceeded; output is withheld until the rate drops "
            "(limits: iopub_msg_rate, iopub_data_rate).\n"));
    }
    return true;
}

nlohmann::json kernel::model() const {
    std::lock_guard lock(mutex_);
    int connections = 0;
    for (const auto& [set_id, s] : sessions_) connections += s.attached() ? 1 : 0;
    return {{"id", id_},
            {"name", spec_name_},
            {"last_activity", iso8601(last_activity_)},
            {"execution_state", to_string(state_)},
            {"connections", connections},
            // Not in Jupyter's model (clients ignore unknown members): the
            // limits this session runs under, as the config resolved them.
            {"cellgate",
             {{"limits", to_json(policy_)},
              {"pause", pause_json_locked()},
              {"origin", origin_},
              // What the kernel runs in now (none while paused or between two sandboxes).
              {"sandbox", sandbox_ ? nlohmann::json{{"runtime", sandbox_->runtime},
                                                   {"platform", sandbox_->platform.empty() ? nlohmann::json(nullptr)
                                                                                           : nlohmann::json(sandbox_->platform)},
                                                   {"memory_merge", sandbox_->memory_merge},
                                                   {"zygote", sandbox_->zygote}}
                                   : nlohmann::json(nullptr)}}}};
}

void kernel::run_silent(const std::string& code, std::function<void(const nlohmann::json&)> done,
                        nlohmann::json user_expressions) {
    auto msg = protocol::make_message("execute_request",
                                      {{"code", code},
                                       {"silent", true},
                                       {"store_history", false},
                                       {"user_expressions", std::move(user_expressions)},
                                       {"allow_stdin", false},
                                       {"stop_on_error", false}},
                                      "cellgate-gateway-" + id_);
    const auto msg_id = nlohmann::json::parse(msg.header).at("msg_id").get<std::string>();
    {
        std::lock_guard lock(mutex_);
        if (closed_) {
            done(nullptr);
            return;
        }
        silent_waiters_[msg_id] = std::move(done);
    }
    gateway_send(messaging::channel::shell, std::move(msg));
}

void kernel::touch() {
    std::lock_guard lock(mutex_);
    last_activity_ = std::chrono::system_clock::now();
    last_activity_wall_ = steady::now();
}

std::chrono::system_clock::time_point kernel::last_activity_time() const {
    std::lock_guard lock(mutex_);
    return last_activity_;
}

void kernel::restore_times(std::chrono::system_clock::time_point created,
                           std::chrono::system_clock::time_point last_activity) {
    // Steady clocks do not survive a process: carry the ages over instead.
    const auto now_sys = std::chrono::system_clock::now();
    const auto now = steady::now();
    const auto age = std::max(now_sys - created, std::chrono::system_clock::duration::zero());
    const auto idle = std::max(now_sys - last_activity, std::chrono::system_clock::duration::zero());
    std::lock_guard lock(mutex_);
    created_ = created;
    created_steady_ = now - std::chrono::duration_cast<steady::duration>(age);
    last_activity_ = last_activity;
    last_activity_wall_ = now - std::chrono::duration_cast<steady::duration>(idle);
}

void kernel::nudge_on_control(bool on) {
    std::lock_guard lock(mutex_);
    nudge_on_control_ = on;
}

steady::time_point kernel::last_activity() const {
    std::lock_guard lock(mutex_);
    return last_activity_wall_;
}

bool kernel::serving_request() const {
    std::lock_guard lock(mutex_);
    return watch_.serving_request();
}

int kernel::connections() const {
    std::lock_guard lock(mutex_);
    int n = 0;
    for (const auto& [set_id, s] : sessions_) n += s.attached() ? 1 : 0;
    return n;
}

}  // namespace cellgate::kernels
