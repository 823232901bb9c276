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

class session_registry {
public:
    session_record add(session_record s);  // assigns the id
    std::optional<session_record> find(const std::string& tenant, const std::string& id) const;
    std::optional<session_record> find_by_path(const std::string& tenant, const std::string& path) const;
    std::vector<session_record> list(const std::string& tenant) const;
    bool update(const session_record& s);
    bool remove(const std::string& tenant, const std::string& id);
    // Sessions bound to a kernel (to drop them when the kernel goes).
    std::vector<session_record> for_kernel(const std::string& kernel_id) const;
    void remove_for_kernel(const std::string& kernel_id);

private:
    mutable std::mutex mutex_;
    std::map<std::string, session_record> sessions_;
};

}  // namespace cellgate::kernels
