#include "kernels/state_store.hpp"

#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <stdexcept>

namespace cellgate::kernels {

namespace {

using sys_clock = std::chrono::system_clock;

std::int64_t to_ms(sys_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
sys_clock::time_point from_ms(std::int64_t ms) { return sys_clock::time_point(std::chrono::milliseconds(ms)); }

// One prepared statement, finalized on every path.
class statement {
public:
    statement(sqlite3* db, const char* sql) : db_(db) {
        if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK)
            throw std::runtime_error(std::string("state store: ") + sqlite3_errmsg(db));
    }
    ~statement() { sqlite3_finalize(s_); }
    statement(const statement&) = delete;
    statement& operator=(const statement&) = delete;

    statement& bind(int i, const std::string& v) {
        sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
        return *this;
    }
    statement& bind(int i, std::int64_t v) {
        sqlite3_bind_int64(s_, i, v);
        return *this;
    }
    bool step() {  // true while rows come
        const int rc = sqlite3_step(s_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw std::runtime_error(std::string("state store: ") + sqlite3_errmsg(db_));
    }
    void reset() {
        sqlite3_reset(s_);
        sqlite3_clear_bindings(s_);
    }
    std::string text(int col) const {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
        return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col))) : std::string();
    }
    std::int64_t integer(int col) const { return sqlite3_column_int64(s_, col); }

private:
    sqlite3* db_;
    sqlite3_stmt* s_ = nullptr;
};

template <typename F>
void logged(const char* what, F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        spdlog::error("state store: {} failed: {}", what, e.what());
    }
}

}  // namespace

nlohmann::json policy_to_json(const kernel_policy& p) {
    return {{"exec_timeout", p.exec_timeout.count()},   {"idle_timeout", p.idle_timeout.count()},
            {"lifetime", p.lifetime.count()},           {"output_limit_bytes", p.output_limit_bytes},
            {"result_limit_bytes", p.result_limit_bytes}, {"upload_limit_bytes", p.upload_limit_bytes},
            {"network", p.network ? *p.network : nlohmann::json()},
            {"pause_on_idle", p.pause_on_idle},         {"auto_resume", p.auto_resume},
            {"pause_at_end", p.pause_at_end},           {"volumes", [&] {
                 auto out = nlohmann::json::array();
                 for (const auto& v : p.volumes)
                     out.push_back({{"id", v.id}, {"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
                 return out;
             }()}};
}

kernel_policy policy_from_json(const nlohmann::json& j, const kernel_policy& fallback) {
    kernel_policy p = fallback;
    if (!j.is_object()) return p;
    p.exec_timeout = std::chrono::seconds(j.value("exec_timeout", p.exec_timeout.count()));
    p.idle_timeout = std::chrono::seconds(j.value("idle_timeout", p.idle_timeout.count()));
    p.lifetime = std::chrono::seconds(j.value("lifetime", p.lifetime.count()));
    p.output_limit_bytes = j.value("output_limit_bytes", p.output_limit_bytes);
    p.result_limit_bytes = j.value("result_limit_bytes", p.result_limit_bytes);
    p.upload_limit_bytes = j.value("upload_limit_bytes", p.upload_limit_bytes);
    if (const auto it = j.find("network"); it != j.end() && it->is_object()) p.network = *it;
    p.pause_on_idle = j.value("pause_on_idle", p.pause_on_idle);
    p.auto_resume = j.value("auto_resume", p.auto_resume);
    p.pause_at_end = j.value("pause_at_end", p.pause_at_end);
    if (const auto it = j.find("volumes"); it != j.end() && it->is_array()) {
        p.volumes.clear();
        for (const auto& v : *it)
            if (v.is_object())
                p.volumes.push_back({v.value("id", ""), v.value("name", ""), v.value("path", ""), v.value("read_only", false)});
    }
    return p;
}

state_store::state_store(const std::filesystem::path& file) : file_(file) {
    std::filesystem::create_directories(file.parent_path());
    // Holds kernel owners and environments: root-only, like the launcher's records.
    const auto old_mask = ::umask(077);
    const int rc = sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                   nullptr);
    ::umask(old_mask);
    if (rc != SQLITE_OK) {
        const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        throw std::runtime_error("cannot open the state database " + file.string() + ": " + why);
    }
    sqlite3_busy_timeout(db_, 5000);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    exec("CREATE TABLE IF NOT EXISTS kernels ("
         " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, spec_name TEXT NOT NULL, env TEXT NOT NULL,"
         " policy TEXT NOT NULL, created_ms INTEGER NOT NULL, last_activity_ms INTEGER NOT NULL)");
    exec("CREATE TABLE IF NOT EXISTS sessions ("
         " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, path TEXT NOT NULL, name TEXT NOT NULL,"
         " type TEXT NOT NULL, kernel_id TEXT NOT NULL)");
    // A paused kernel's row: what its pause kept ("memory" or "files") and
    // since when; the pause itself (image, workspace) is the launcher's.
    exec("CREATE TABLE IF NOT EXISTS paused_kernels ("
         " id TEXT PRIMARY KEY, mode TEXT NOT NULL, since_ms INTEGER NOT NULL, image_bytes INTEGER NOT NULL)");
    exec("CREATE TABLE IF NOT EXISTS surface_records ("
         " kind TEXT NOT NULL, id TEXT NOT NULL, kernel_id TEXT NOT NULL, body TEXT NOT NULL,"
         " PRIMARY KEY (kind, id))");
    // A session's records without reading every kernel's (its egress log at each start).
    exec("CREATE INDEX IF NOT EXISTS surface_records_by_kernel ON surface_records (kind, kernel_id)");
}

state_store::~state_store() { sqlite3_close(db_); }

void state_store::exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
        const std::string why = err ? err : "unknown error";
        sqlite3_free(err);
        throw std::runtime_error("state store: " + why);
    }
}

void state_store::put_kernel(const persisted_kernel& k) {
    std::lock_guard lock(mutex_);
    logged("saving a kernel", [&] {
        statement s(db_,
                    "INSERT OR REPLACE INTO kernels (id, tenant, spec_name, env, policy, created_ms, last_activity_ms)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
        s.bind(1, k.id).bind(2, k.tenant).bind(3, k.spec_name).bind(4, nlohmann::json(k.env).dump());
        s.bind(5, policy_to_json(k.policy).dump()).bind(6, to_ms(k.created)).bind(7, to_ms(k.last_activity));
        s.step();
    });
}

void state_store::set_paused(const std::string& id, const std::string& mode, sys_clock::time_point since,
                             std::uint64_t image_bytes) {
    std::lock_guard lock(mutex_);
    logged("saving a pause", [&] {
        if (mode.empty()) {
            statement(db_, "DELETE FROM paused_kernels WHERE id = ?1").bind(1, id).step();
            return;
        }
        statement s(db_, "INSERT OR REPLACE INTO paused_kernels (id, mode, since_ms, image_bytes) VALUES (?1, ?2, ?3, ?4)");
        s.bind(1, id).bind(2, mode).bind(3, to_ms(since)).bind(4, static_cast<std::int64_t>(image_bytes));
        s.step();
    });
}

void state_store::remove_kernel(const std::string& id) {
    std::lock_guard lock(mutex_);
    logged("forgetting a kernel", [&] {
        exec("BEGIN");
        try {
            statement(db_, "DELETE FROM sessions WHERE kernel_id = ?1").bind(1, id).step();
            statement(db_, "DELETE FROM surface_records WHERE kernel_id = ?1").bind(1, id).step();
            statement(db_, "DELETE FROM kernels WHERE id = ?1").bind(1, id).step();
            statement(db_, "DELETE FROM paused_kernels WHERE id = ?1").bind(1, id).step();
            exec("COMMIT");
        } catch (...) {
            exec("ROLLBACK");
            throw;
        }
    });
}

void state_store::touch_kernels(const std::vector<std::pair<std::string, sys_clock::time_point>>& seen) {
    if (seen.empty()) return;
    std::lock_guard lock(mutex_);
    logged("saving activity times", [&] {
        exec("BEGIN");
        try {
            statement s(db_, "UPDATE kernels SET last_activity_ms = ?2 WHERE id = ?1");
            for (const auto& [id, t] : seen) {
                s.bind(1, id).bind(2, to_ms(t));
                s.step();
                s.reset();
            }
            exec("COMMIT");
        } catch (...) {
            exec("ROLLBACK");
            throw;
        }
    });
}

std::vector<persisted_kernel> state_store::kernels() {
    std::lock_guard lock(mutex_);
    std::vector<persisted_kernel> out;
    logged("reading kernels", [&] {
        statement s(db_,
                    "SELECT k.id, k.tenant, k.spec_name, k.env, k.policy, k.created_ms, k.last_activity_ms,"
                    " p.mode, p.since_ms, p.image_bytes FROM kernels k LEFT JOIN paused_kernels p ON p.id = k.id");
        while (s.step()) {
            persisted_kernel k;
            k.id = s.text(0);
            k.tenant = s.text(1);
            k.spec_name = s.text(2);
            const auto env = nlohmann::json::parse(s.text(3), nullptr, false);
            if (env.is_object())
                for (const auto& [name, value] : env.items())
                    if (value.is_string()) k.env[name] = value.get<std::string>();
            k.policy = policy_from_json(nlohmann::json::parse(s.text(4), nullptr, false), kernel_policy{});
            k.created = from_ms(s.integer(5));
            k.last_activity = from_ms(s.integer(6));
            k.paused = s.text(7);
            k.paused_since = from_ms(s.integer(8));
            k.paused_image_bytes = static_cast<std::uint64_t>(s.integer(9));
            out.push_back(std::move(k));
        }
    });
    return out;
}

void state_store::put_session(const session_record& r) {
    std::lock_guard lock(mutex_);
    logged("saving a session", [&] {
        statement s(db_, "INSERT OR REPLACE INTO sessions (id, tenant, path, name, type, kernel_id)"
                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
        s.bind(1, r.id).bind(2, r.tenant).bind(3, r.path).bind(4, r.name).bind(5, r.type).bind(6, r.kernel_id);
        s.step();
    });
}

void state_store::remove_session(const std::string& id) {
    std::lock_guard lock(mutex_);
    logged("forgetting a session", [&] { statement(db_, "DELETE FROM sessions WHERE id = ?1").bind(1, id).step(); });
}

std::vector<session_record> state_store::sessions() {
    std::lock_guard lock(mutex_);
    std::vector<session_record> out;
    logged("reading sessions", [&] {
        statement s(db_, "SELECT id, tenant, path, name, type, kernel_id FROM sessions");
        while (s.step()) out.push_back({s.text(0), s.text(1), s.text(2), s.text(3), s.text(4), s.text(5)});
    });
    return out;
}

void state_store::put_record(const surface_record& r) {
    std::lock_guard lock(mutex_);
    logged("saving a surface record", [&] {
        statement s(db_, "INSERT OR REPLACE INTO surface_records (kind, id, kernel_id, body) VALUES (?1, ?2, ?3, ?4)");
        s.bind(1, r.kind).bind(2, r.id).bind(3, r.kernel_id).bind(4, r.body.dump());
        s.step();
    });
}

void state_store::remove_record(const std::string& kind, const std::string& id) {
    std::lock_guard lock(mutex_);
    logged("forgetting a surface record", [&] {
        statement(db_, "DELETE FROM surface_records WHERE kind = ?1 AND id = ?2").bind(1, kind).bind(2, id).step();
    });
}

std::vector<state_store::surface_record> state_store::records(const std::string& kind) {
    std::lock_guard lock(mutex_);
    std::vector<surface_record> out;
    logged("reading surface records", [&] {
        statement s(db_, "SELECT id, kernel_id, body FROM surface_records WHERE kind = ?1");
        s.bind(1, kind);
        while (s.step()) {
            auto body = nlohmann::json::parse(s.text(2), nullptr, false);
            if (!body.is_discarded()) out.push_back({kind, s.text(0), s.text(1), std::move(body)});
        }
    });
    return out;
}

std::vector<state_store::surface_record> state_store::records_of(const std::string& kind, const std::string& kernel_id) {
    std::lock_guard lock(mutex_);
    std::vector<surface_record> out;
    logged("reading a kernel's surface records", [&] {
        statement s(db_, "SELECT id, body FROM surface_records WHERE kind = ?1 AND kernel_id = ?2");
        s.bind(1, kind).bind(2, kernel_id);
        while (s.step()) {
            auto body = nlohmann::json::parse(s.text(1), nullptr, false);
            if (!body.is_discarded()) out.push_back({kind, s.text(0), kernel_id, std::move(body)});
        }
    });
    return out;
}

std::optional<state_store::surface_record> state_store::record(const std::string& kind, const std::string& id) {
    std::lock_guard lock(mutex_);
    std::optional<surface_record> out;
    logged("reading a surface record", [&] {
        statement s(db_, "SELECT kernel_id, body FROM surface_records WHERE kind = ?1 AND id = ?2");
        s.bind(1, kind).bind(2, id);
        if (s.step()) {
            auto body = nlohmann::json::parse(s.text(1), nullptr, false);
            if (!body.is_discarded()) out = surface_record{kind, id, s.text(0), std::move(body)};
        }
    });
    return out;
}

void state_store::write_records(const std::vector<surface_record>& puts,
                                const std::vector<std::pair<std::string, std::string>>& removals) {
    if (puts.empty() && removals.empty()) return;
    std::lock_guard lock(mutex_);
    logged("saving surface records", [&] {
        exec("BEGIN");
        try {
            statement put(db_, "INSERT OR REPLACE INTO surface_records (kind, id, kernel_id, body) VALUES (?1, ?2, ?3, ?4)");
            for (const auto& r : puts) {
                put.bind(1, r.kind).bind(2, r.id).bind(3, r.kernel_id).bind(4, r.body.dump());
                put.step();
                put.reset();
            }
            statement remove(db_, "DELETE FROM surface_records WHERE kind = ?1 AND id = ?2");
            for (const auto& [kind, id] : removals) {
                remove.bind(1, kind).bind(2, id);
                remove.step();
                remove.reset();
            }
            exec("COMMIT");
        } catch (...) {
            exec("ROLLBACK");
            throw;
        }
    });
}

}  // namespace cellgate::kernels
