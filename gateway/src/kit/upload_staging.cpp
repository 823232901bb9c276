#include "kit/upload_staging.hpp"

namespace cellgate::kit {

std::shared_ptr<const void> upload_staging::reserve(const std::string& tenant, std::uint64_t bytes) {
    {
        std::lock_guard lock(state_->mutex);
        auto& mine = state_->reserved[tenant];
        if (bytes > state_->per_tenant - mine) {
            if (mine == 0) state_->reserved.erase(tenant);
            ++state_->refused;
            return nullptr;
        }
        mine += bytes;
        state_->total += bytes;
    }
    // The deleter gives the bytes back; it owns the state, so a reservation
    // outliving the gateway's object is harmless.
    return std::shared_ptr<const void>(static_cast<const void*>(state_.get()), [s = state_, tenant, bytes](const void*) {
        std::lock_guard lock(s->mutex);
        s->total -= bytes;
        if (const auto it = s->reserved.find(tenant); it != s->reserved.end() && (it->second -= bytes) == 0)
            s->reserved.erase(it);
    });
}

void upload_staging::render(std::string& out) const {
    std::lock_guard lock(state_->mutex);
    out += "# HELP cellgate_upload_staging_bytes Bytes reserved by archive uploads being staged, all tenants.\n"
           "# TYPE cellgate_upload_staging_bytes gauge\ncellgate_upload_staging_bytes " +
           std::to_string(state_->total) + "\n";
    out += "# HELP cellgate_upload_staging_refused_total Archive uploads refused: the tenant's staging budget was "
           "taken.\n# TYPE cellgate_upload_staging_refused_total counter\ncellgate_upload_staging_refused_total " +
           std::to_string(state_->refused) + "\n";
}

}  // namespace cellgate::kit
