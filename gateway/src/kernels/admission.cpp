#include "kernels/admission.hpp"

namespace cellgate::kernels {

void admission::set_quota(const std::string& tenant, std::size_t max_kernels) { quota_[tenant] = max_kernels; }

std::size_t admission::limit(const std::string& tenant) const {
    if (const auto it = quota_.find(tenant); it != quota_.end() && it->second > 0) return it->second;
    return default_per_tenant_;
}

std::optional<std::string> admission::admit(const std::string& tenant) {
    if (admitted_ >= max_total_) return "Session limit reached (" + std::to_string(max_total_) + " in total)";
    const auto quota = limit(tenant);
    if (quota > 0 && admitted(tenant) >= quota)
        return "Session limit reached for this token (" + std::to_string(quota) + ")";
    readmit(tenant);
    return std::nullopt;
}

void admission::readmit(const std::string& tenant) {
    ++admitted_;
    ++by_tenant_[tenant];
}

void admission::release(const std::string& tenant) {
    if (admitted_ > 0) --admitted_;
    if (const auto it = by_tenant_.find(tenant); it != by_tenant_.end() && --it->second == 0) by_tenant_.erase(it);
}

std::size_t admission::admitted(const std::string& tenant) const {
    const auto it = by_tenant_.find(tenant);
    return it == by_tenant_.end() ? 0 : it->second;
}

}  // namespace cellgate::kernels
