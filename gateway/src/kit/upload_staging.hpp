#pragma once

// Archive uploads (PUT …/workspace, POST /v1/sessions with a tar or a form)
// are staged in unnamed temporary files on the gateway's disk, each up to
// the upload limit. A tenant's uploads at once share a byte budget
// (--max-upload-staging-per-tenant): an upload reserves its limit when it
// starts and gives it back when its request is done (security review turn
// 3, H1). Past the budget, 429.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace cellgate::kit {

class upload_staging {
public:
    explicit upload_staging(std::uint64_t per_tenant) : state_(std::make_shared<state>(per_tenant)) {}

    // `bytes` reserved for `tenant` until the last copy of the result goes;
    // null when that would take the tenant past its budget.
    std::shared_ptr<const void> reserve(const std::string& tenant, std::uint64_t bytes);

    std::uint64_t per_tenant() const noexcept { return state_->per_tenant; }
    // Prometheus: cellgate_upload_staging_bytes, cellgate_upload_staging_refused_total.
    void render(std::string& out) const;

private:
    struct state {
        explicit state(std::uint64_t cap) : per_tenant(cap) {}
        const std::uint64_t per_tenant;
        mutable std::mutex mutex;
        std::map<std::string, std::uint64_t> reserved;
        std::uint64_t total = 0, refused = 0;
    };
    std::shared_ptr<state> state_;
};

}  // namespace cellgate::kit
