#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cellgate::kernels {

// Jupyter "sessions": a named binding of a path to a kernel, per tenant.
struct session_record {
    std::string id, tenant, path, name, type, kernel_id;
};

class state_store;

class session_registry {
public:
    // Records per tenant: each POST /api/sessions with a new path adds one,
    // even for a kernel that already exists, so the kernel quota does not bound them (L2).
    static constexpr std::size_t default_max_per_tenant = 256;
    explicit session_registry(std::size_t max_per_tenant = default_max_per_tenant) : max_per_tenant_(max_per_tenant) {}
    std::size_t max_per_tenant() const noexcept { return max_per_tenant_; }

    // Every change is also written to `store` (null: memory only).
    void persist_to(state_store* store) noexcept { store_ = store; }
    // Puts back a session read from the store at start-up.
    void restore(const session_record& s);
    // Assigns the id; nullopt when the tenant already has max_per_tenant() records.
    std::optional<session_record> add(session_record s);
    bool has_room(const std::string& tenant) const;
    std::optional<session_record> find(const std::string& tenant, const std::string& id) const;
    std::optional<session_record> find_by_path(const std::string& tenant, const std::string& path) const;
    std::vector<session_record> list(const std::string& tenant) const;
    bool update(const session_record& s);
    bool remove(const std::string& tenant, const std::string& id);
    // Sessions bound to a kernel (to drop them when the kernel goes).
    std::vector<session_record> for_kernel(const std::string& kernel_id) const;
    void remove_for_kernel(const std::string& kernel_id);

private:
    const std::size_t max_per_tenant_;
    mutable std::mutex mutex_;
    std::map<std::string, session_record> sessions_;
    state_store* store_ = nullptr;
};

}  // namespace cellgate::kernels
