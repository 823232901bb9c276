#pragma once

#include "kernels/kernel.hpp"
#include "kernels/session_registry.hpp"

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace cellgate::kernels {

// What a restarted gateway needs to take a kernel back: who owns it, what it
// runs, the limits it lives by and how old and idle it is. The sandbox itself
// (endpoints, key, pid) is the launcher's record in its run dir.
struct persisted_kernel {
    std::string id, tenant, spec_name;
    std::map<std::string, std::string> env;
    kernel_policy policy;
    std::chrono::system_clock::time_point created, last_activity;
    // Paused: what the pause kept ("memory" or "files"); empty while it runs.
    std::string paused;
    std::chrono::system_clock::time_point paused_since{};
    std::uint64_t paused_image_bytes = 0;
};

// The session registry's durable half: an embedded SQLite database (WAL,
// synchronous=NORMAL: a committed write survives the process being killed;
// only a power cut can lose the last few). Every write is one statement or
// one transaction; all calls are thread-safe. Failures are logged, never
// thrown at a request: the live registry in memory stays the authority while
// the gateway runs.
class state_store {
public:
    // Opens or creates the database (and its tables). Throws on failure.
    explicit state_store(const std::filesystem::path& file);
    ~state_store();
    state_store(const state_store&) = delete;
    state_store& operator=(const state_store&) = delete;

    void put_kernel(const persisted_kernel& k);
    void remove_kernel(const std::string& id);  // and its sessions
    // Marks a kernel paused (mode "memory" or "files") or, with mode "", running.
    void set_paused(const std::string& id, const std::string& mode, std::chrono::system_clock::time_point since,
                    std::uint64_t image_bytes);
    // Last activity of many kernels in one transaction (written periodically).
    void touch_kernels(const std::vector<std::pair<std::string, std::chrono::system_clock::time_point>>& seen);
    std::vector<persisted_kernel> kernels();

    void put_session(const session_record& s);
    void remove_session(const std::string& id);
    std::vector<session_record> sessions();

    // What a surface keeps about a kernel (the E2B adapter's sandbox record,
    // say): one JSON document per (kind, id), removed with its kernel.
    struct surface_record {
        std::string kind, id, kernel_id;
        nlohmann::json body;
    };
    void put_record(const surface_record& r);
    void remove_record(const std::string& kind, const std::string& id);
    std::vector<surface_record> records(const std::string& kind);
    // One kernel's records of a kind (by the (kind, kernel_id) index), and one record.
    std::vector<surface_record> records_of(const std::string& kind, const std::string& kernel_id);
    std::optional<surface_record> record(const std::string& kind, const std::string& id);
    // Many puts and removals in one transaction (the egress log's batches).
    void write_records(const std::vector<surface_record>& puts,
                       const std::vector<std::pair<std::string, std::string>>& removals);

    const std::filesystem::path& file() const noexcept { return file_; }

private:
    void exec(const char* sql);
    std::filesystem::path file_;
    std::mutex mutex_;
    sqlite3* db_ = nullptr;
};

nlohmann::json policy_to_json(const kernel_policy& p);
kernel_policy policy_from_json(const nlohmann::json& j, const kernel_policy& fallback);

}  // namespace cellgate::kernels
