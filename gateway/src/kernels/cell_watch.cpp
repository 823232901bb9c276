#include "kernels/cell_watch.hpp"

#include "kernels/cell_notices.hpp"

#include "messaging/json_peek.hpp"

#include <algorithm>

namespace cellgate::kernels {

namespace {

using json = nlohmann::json;
namespace peek = messaging::json_peek;

std::shared_ptr<messaging::kernel_message> made(messaging::channel chan, std::string_view type, const json& content,
                                              const std::string& parent_header) {
    return messaging::make_gateway_message(chan, type, content, "cellgate-gateway", parent_header);
}

bool is_rich(const std::string& type) {
    return type == "display_data" || type == "execute_result" || type == "update_display_data";
}

// The first `keep` bytes of a stream message's text (cut where a UTF-8
// character starts), as a new stream message under the same cell; null when
// there is nothing to keep or the text is not where a stream keeps it.
std::shared_ptr<messaging::kernel_message> stream_head(const messaging::kernel_message& m, std::size_t keep) {
    if (keep == 0) return nullptr;
    const auto name = peek::string_member(m.msg.content, "name", 16);
    const auto raw = peek::member(m.msg.content, "text");
    if (!name || !raw || raw->size() < 2 || raw->front() != '"') return nullptr;
    const std::string_view body = raw->substr(1, raw->size() - 2);
    std::string text;
    for (std::size_t i = 0; i < body.size() && text.size() < keep;) {
        if (body[i] != '\\') {
            text.push_back(body[i++]);
            continue;
        }
        i = peek::detail::decode_escape(body, i, [&text](char c) { text.push_back(c); });
        if (i == peek::npos) return nullptr;
    }
    if (text.size() > keep) text.resize(keep);
    // Back off a character cut in two.
    std::size_t end = text.size();
    std::size_t lead = end;
    while (lead > 0 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead > 0) {
        const auto c = static_cast<unsigned char>(text[lead - 1]);
        const std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (end - (lead - 1) < len) end = lead - 1;
    }
    text.resize(end);
    if (text.empty()) return nullptr;
    json content = {{"name", *name}, {"text", std::move(text)}};
    auto head = made(messaging::channel::iopub, "stream", content, m.msg.parent_header);
    return head;
}

}  // namespace

cell_watch::made_message cell_watch::notice(std::string_view text, const std::string& parent_header) {
    return made(messaging::channel::iopub, "stream", {{"name", "stderr"}, {"text", text}}, parent_header);
}

void cell_watch::own(std::string msg_id) {
    if (own_.size() >= max_remembered) own_.pop_front();
    own_.push_back(std::move(msg_id));
}

void cell_watch::requested(std::string msg_id, std::uint64_t set_id) {
    if (requests_.size() >= max_remembered) requests_.pop_front();
    requests_.emplace_back(std::move(msg_id), set_id);
}

std::uint64_t cell_watch::set_of(const std::string& msg_id) const {
    for (auto it = requests_.rbegin(); it != requests_.rend(); ++it)
        if (it->first == msg_id) return it->second;
    return 0;
}

void cell_watch::on_status(const messaging::kernel_message& m, std::string_view state, clock::time_point now) {
    const auto& parent = m.fields.parent_msg_id;
    if (parent.empty()) return;
    if (state == "idle") {
        if (cell_ && cell_->msg_id == parent) {
            // Its reply may still be on its way (another socket): wait for it a little.
            if (ending_) end(std::move(*std::exchange(ending_, std::nullopt)));
            cell_->ended = now;
            if (cell_->reply_status.empty()) ending_ = std::move(cell_);
            else end(std::move(*cell_));
            cell_.reset();
        }
        if (own_running_ == parent) own_running_.clear();
        std::erase(own_, parent);
        std::erase_if(requests_, [&](const auto& r) { return r.first == parent; });
        return;
    }
    if (state != "busy") return;
    if (std::find(own_.begin(), own_.end(), parent) != own_.end()) {
        own_running_ = parent;
        return;
    }
    if (peek::string_member(m.msg.parent_header, "msg_type", 32).value_or("") != "execute_request") return;
    if (ending_) end(std::move(*std::exchange(ending_, std::nullopt)));
    if (cell_) {  // its idle never came (ipykernel runs one at a time): it is over
        cell_->ended = now;
        end(std::move(*cell_));
    }
    cell c;
    c.msg_id = parent;
    c.parent_header = m.msg.parent_header;
    c.started = now;
    cell_summary started;
    started.id = parent;
    started.surface = "jupyter";
    started.started = now;
    report(std::move(started));
    cell_ = std::move(c);
}

void cell_watch::on_reply(const messaging::kernel_message& m) {
    const auto& parent = m.fields.parent_msg_id;
    cell* c = cell_ && cell_->msg_id == parent ? &*cell_ : ending_ && ending_->msg_id == parent ? &*ending_ : nullptr;
    if (c == nullptr) return;
    c->reply_status = peek::string_member(m.msg.content, "status", 16).value_or("unknown");
    if (c->error_name.empty())
        if (auto ename = peek::string_member(m.msg.content, "ename", 128)) c->error_name = std::move(*ename);
    if (ending_ && c == &*ending_) end(std::move(*std::exchange(ending_, std::nullopt)));
}

void cell_watch::reset(clock::time_point now) {
    if (ending_) end(std::move(*std::exchange(ending_, std::nullopt)));
    if (cell_) {
        cell_->ended = now;
        cell_->restarted = true;
        end(std::move(*cell_));
    }
    cell_.reset();
    own_running_.clear();
}

std::vector<cell_summary> cell_watch::take_reports(clock::time_point now) {
    if (ending_ && now - ending_->ended >= reply_wait) end(std::move(*std::exchange(ending_, std::nullopt)));
    return std::exchange(reports_, {});
}

void cell_watch::report(cell_summary s) {
    // Only a kernel without a ledger leaves them here; the newest are kept.
    if (reports_.size() >= max_reports) reports_.erase(reports_.begin());
    reports_.push_back(std::move(s));
}

void cell_watch::end(cell c) {
    cell_summary s;
    s.id = std::move(c.msg_id);
    s.surface = "jupyter";
    s.ended = true;
    s.code = std::move(c.code);
    s.code_bytes = c.code_bytes;
    s.started = c.started;
    s.ended_at = c.ended;
    s.error_name = std::move(c.error_name);
    // As a /v1 execution's status reads.
    if (c.restarted) s.status = c.stage > 0 ? "timeout" : "kernel_died";
    else if (c.stage > 0) s.status = "timeout";
    else if (c.reply_status == "aborted") s.status = "aborted";
    else if (s.error_name == "KeyboardInterrupt") s.status = "interrupted";
    else if (c.errors > 0 || c.reply_status == "error") s.status = "error";
    else s.status = "ok";
    s.stdout_bytes = c.stdout_bytes;
    s.stderr_bytes = c.stderr_bytes;
    s.result_bytes = c.produced_result_bytes;
    s.results = c.results;
    s.output_truncated = c.text_cut;
    s.results_truncated = c.results_cut;
    s.kernel_restarted = c.restarted;
    report(std::move(s));
}

cell_watch::verdict cell_watch::on_iopub(const messaging::kernel_message& m, std::string_view state,
                                         const kernel_policy& p, clock::time_point now) {
    const auto& type = m.fields.msg_type;
    if (type == "status") {
        on_status(m, state, now);
        return {};
    }
    if (!cell_ || m.fields.parent_msg_id != cell_->msg_id) return {};
    if (type == "execute_input") {
        if (const auto n = peek::member(m.msg.content, "execution_count"); n && n->size() < 24) cell_->execution_count = *n;
        // The code, as the kernel runs it: kept for the ledger's hash, up to a bound.
        if (const auto raw = peek::member(m.msg.content, "code"); raw && raw->size() >= 2 && raw->front() == '"') {
            const auto body = raw->substr(1, raw->size() - 2);
            cell_->code_bytes = peek::decoded_size(body).value_or(0);
            cell_->code = cell_->code_bytes <= cell_summary::max_code_bytes
                              ? peek::decode_string(body, cell_summary::max_code_bytes)
                              : std::nullopt;
        }
        return {};
    }
    if (type == "stream") {
        count_text(m);
        return on_stream(m, p);
    }
    if (is_rich(type)) {
        if (type != "update_display_data") ++cell_->results;
        cell_->produced_result_bytes += m.wire_bytes();
        return on_result(m, p);
    }
    if (type == "error") return on_error(m);
    return {};
}

void cell_watch::count_text(const messaging::kernel_message& m) {
    std::optional<std::string_view> name, text;
    peek::for_each_member(m.msg.content, [&](std::string_view k, std::string_view v) {
        if (peek::key_is(k, "name")) name = v;
        else if (peek::key_is(k, "text")) text = v;
        return true;
    });
    if (!text || text->size() < 2 || text->front() != '"') return;
    const auto bytes = peek::decoded_size(text->substr(1, text->size() - 2)).value_or(0);
    (name && *name == "\"stderr\"" ? cell_->stderr_bytes : cell_->stdout_bytes) += bytes;
}

cell_watch::verdict cell_watch::on_stream(const messaging::kernel_message& m, const kernel_policy& p) {
    const auto limit = p.output_limit_bytes;
    auto& c = *cell_;
    const auto size = m.msg.content.size();
    if (limit == 0 || (!c.text_cut && c.text_bytes + size <= limit)) {
        c.text_bytes += size;
        return {};
    }
    verdict v{false, {}};
    if (c.text_cut) return v;
    c.text_cut = true;
    // The part that fits is shown, then the notice; the rest is withheld.
    auto head = stream_head(m, limit - std::min(limit, c.text_bytes));
    c.text_bytes = limit;
    // The notice goes on the stream whose text reached the limit, as a /v1 execution's does.
    const auto stream = peek::string_member(m.msg.content, "name", 16).value_or("stdout");
    auto note = made(messaging::channel::iopub, "stream",
                     {{"name", stream == "stderr" ? "stderr" : "stdout"}, {"text", cell_notices::output_truncated(limit)}},
                     c.parent_header);
    if (head) v.before.push_back(std::move(head));
    v.before.push_back(std::move(note));
    return v;
}

cell_watch::verdict cell_watch::on_result(const messaging::kernel_message& m, const kernel_policy& p) {
    const auto limit = p.result_limit_bytes;
    auto& c = *cell_;
    const auto size = m.wire_bytes();
    if (limit == 0 || (!c.results_cut && c.result_bytes + size <= limit)) {
        c.result_bytes += size;
        return {};
    }
    verdict v{false, {}};
    if (!c.results_cut) {
        c.results_cut = true;
        v.before.push_back(notice(cell_notices::results_dropped(limit), c.parent_header));
    }
    return v;
}

cell_watch::verdict cell_watch::on_error(const messaging::kernel_message& m) {
    auto& c = *cell_;
    if (auto ename = peek::string_member(m.msg.content, "ename", 128)) c.error_name = std::move(*ename);
    if (++c.errors <= max_errors_per_cell) return {};
    verdict v{false, {}};
    if (!c.errors_cut) {
        c.errors_cut = true;
        v.before.push_back(notice("[cellgate] This cell raised more than " + std::to_string(max_errors_per_cell) +
                             " errors; later ones are not shown.\n",
                         c.parent_header));
    }
    return v;
}

cell_watch::overdue cell_watch::check(const kernel_policy& p, clock::time_point now, clock::duration grace) {
    overdue o;
    if (!cell_ || p.exec_timeout.count() == 0) return o;
    auto& c = *cell_;
    const auto limit = std::to_string(p.exec_timeout.count()) + " s";
    if (c.stage == 0 && now - c.started >= p.exec_timeout) {
        c.stage = 1;
        c.interrupted = now;
        o.what = action::interrupt;
        o.notice = notice(cell_notices::time_limit(p.exec_timeout), c.parent_header);
        return o;
    }
    if (c.stage != 1 || now - c.interrupted < grace) return o;
    c.stage = 2;
    o.what = action::restart;
    o.notice = notice(cell_notices::not_stopped(std::chrono::duration_cast<std::chrono::milliseconds>(grace)),
                      c.parent_header);
    const std::string evalue = "The cell ran past its time limit of " + limit +
                               " (exec_timeout) and did not stop on interrupt; the kernel was restarted";
    const json traceback = json::array({"TimeoutError: " + evalue});
    o.error = made(messaging::channel::iopub, "error", {{"ename", "TimeoutError"}, {"evalue", evalue}, {"traceback", traceback}},
                   c.parent_header);
    json reply = {{"status", "error"}, {"ename", "TimeoutError"}, {"evalue", evalue}, {"traceback", traceback}};
    reply["execution_count"] = json::parse(c.execution_count, nullptr, false);
    if (reply["execution_count"].is_discarded()) reply["execution_count"] = nullptr;
    o.reply = made(messaging::channel::shell, "execute_reply", reply, c.parent_header);
    o.set_id = set_of(c.msg_id);
    return o;
}

}  // namespace cellgate::kernels
