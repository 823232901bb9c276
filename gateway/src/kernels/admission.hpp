#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>

namespace cellgate::kernels {

// How many kernels may exist: in total, and per tenant (a tenant's own quota
// from its token entry, else the default). A kernel is counted from the
// moment its start is admitted, so concurrent starts cannot race past a
// limit. Not thread-safe: the manager calls it under its own lock.
class admission {
public:
    admission(std::size_t max_total, std::size_t default_per_tenant) noexcept
        : max_total_(max_total), default_per_tenant_(default_per_tenant) {}

    // A tenant's own cap; 0 = the default.
    void set_quota(const std::string& tenant, std::size_t max_kernels);
    // Counts one more kernel for `tenant`, or says why not (for a 429).
    std::optional<std::string> admit(const std::string& tenant);
    // Counts one kernel that is already running (taken back after a restart
    // of the gateway): never refused.
    void readmit(const std::string& tenant);
    void release(const std::string& tenant);

    std::size_t admitted() const noexcept { return admitted_; }
    std::size_t admitted(const std::string& tenant) const;
    std::size_t max_total() const noexcept { return max_total_; }
    // The tenant's cap (its own, else the default); 0 = none.
    std::size_t limit(const std::string& tenant) const;
    const std::map<std::string, std::size_t>& by_tenant() const noexcept { return by_tenant_; }

private:
    std::size_t max_total_, default_per_tenant_;
    std::size_t admitted_ = 0;
    std::map<std::string, std::size_t> by_tenant_, quota_;
};

}  // namespace cellgate::kernels
