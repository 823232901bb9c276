#include "mcp/mcp_sessions.hpp"

#include "http/auth.hpp"

#include <spdlog/spdlog.h>

namespace cellgate::mcp {

using nlohmann::json;

namespace {

constexpr const char* record_kind = "mcp_session";
// A session's last use is written back at most this often (a busy client
// must not turn every call into a database write).
constexpr auto save_interval = std::chrono::minutes(10);

long long ms(sys_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
sys_clock::time_point from_ms(long long v) {
    return sys_clock::time_point(std::chrono::duration_cast<sys_clock::duration>(std::chrono::milliseconds(v)));
}

}  // namespace

mcp_sessions::mcp_sessions(kernels::state_store* store, std::size_t max_per_tenant, std::chrono::seconds idle_limit)
    : store_(store), max_per_tenant_(std::max<std::size_t>(max_per_tenant, 1)), idle_limit_(idle_limit) {}

mcp_session mcp_sessions::open(const std::string& tenant, const std::string& protocol_version,
                               const std::string& client_name, const std::string& client_version) {
    const auto now = sys_clock::now();
    mcp_session s{http::make_token(), tenant, protocol_version, client_name.substr(0, 128), client_version.substr(0, 64),
                  now, now};
    {
        std::lock_guard lock(mutex_);
        std::size_t count = 0;
        const mcp_session* oldest = nullptr;
        for (const auto& [id, other] : sessions_) {
            if (other.tenant != tenant) continue;
            ++count;
            if (oldest == nullptr || other.last_used < oldest->last_used) oldest = &other;
        }
        if (count >= max_per_tenant_ && oldest != nullptr) {
            spdlog::info("tenant {}: MCP session cap ({}) reached; ending its least recently used one", tenant,
                         max_per_tenant_);
            forget_locked(std::string(oldest->id));
        }
        sessions_[s.id] = s;
        saved_use_[s.id] = now;
    }
    save(s);
    return s;
}

std::optional<mcp_session> mcp_sessions::use(const std::string& tenant, const std::string& id) {
    const auto now = sys_clock::now();
    std::optional<mcp_session> out;
    {
        std::lock_guard lock(mutex_);
        const auto it = sessions_.find(id);
        if (it == sessions_.end() || it->second.tenant != tenant) return std::nullopt;
        if (idle_limit_.count() > 0 && now - it->second.last_used >= idle_limit_) {
            forget_locked(id);
            return std::nullopt;
        }
        it->second.last_used = now;
        out = it->second;
        if (now - saved_use_[id] < save_interval) return out;
        saved_use_[id] = now;
    }
    save(*out);
    return out;
}

bool mcp_sessions::close(const std::string& tenant, const std::string& id) {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.tenant != tenant) return false;
    forget_locked(id);
    return true;
}

void mcp_sessions::load() {
    if (store_ == nullptr) return;
    const auto now = sys_clock::now();
    std::lock_guard lock(mutex_);
    for (const auto& r : store_->records(record_kind)) {
        try {
            mcp_session s{r.id,
                          r.body.at("tenant").get<std::string>(),
                          r.body.at("protocol_version").get<std::string>(),
                          r.body.value("client_name", ""),
                          r.body.value("client_version", ""),
                          from_ms(r.body.at("created_ms").get<long long>()),
                          from_ms(r.body.at("last_used_ms").get<long long>())};
            if (idle_limit_.count() > 0 && now - s.last_used >= idle_limit_) {
                store_->remove_record(record_kind, r.id);
                continue;
            }
            saved_use_[s.id] = s.last_used;
            sessions_[s.id] = std::move(s);
        } catch (const std::exception& e) {
            spdlog::warn("MCP session record unreadable, dropped: {}", e.what());
            store_->remove_record(record_kind, r.id);
        }
    }
    if (!sessions_.empty()) spdlog::info("took back {} MCP session(s)", sessions_.size());
}

std::size_t mcp_sessions::size() const {
    std::lock_guard lock(mutex_);
    return sessions_.size();
}

void mcp_sessions::save(const mcp_session& s) {
    if (store_ == nullptr) return;
    store_->put_record({record_kind, s.id, "",
                        json{{"tenant", s.tenant},
                             {"protocol_version", s.protocol_version},
                             {"client_name", s.client_name},
                             {"client_version", s.client_version},
                             {"created_ms", ms(s.created)},
                             {"last_used_ms", ms(s.last_used)}}});
}

void mcp_sessions::forget_locked(const std::string& id) {
    sessions_.erase(id);
    saved_use_.erase(id);
    if (store_ != nullptr) store_->remove_record(record_kind, id);
}

}  // namespace cellgate::mcp
