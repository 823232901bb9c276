#include "kernels/session_registry.hpp"
#include "kernels/node_id.hpp"

#include "cellgate/protocol/message.hpp"
#include "kernels/state_store.hpp"

namespace cellgate::kernels {

std::optional<session_record> session_registry::add(session_record s) {
    s.id = make_node_id();
    std::lock_guard lock(mutex_);
    std::size_t mine = 0;
    for (const auto& [id, r] : sessions_) mine += r.tenant == s.tenant ? 1u : 0u;
    if (mine >= max_per_tenant_) return std::nullopt;
    sessions_[s.id] = s;
    if (store_) store_->put_session(s);
    return s;
}

bool session_registry::has_room(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    std::size_t mine = 0;
    for (const auto& [id, r] : sessions_) mine += r.tenant == tenant ? 1u : 0u;
    return mine < max_per_tenant_;
}

void session_registry::restore(const session_record& s) {
    std::lock_guard lock(mutex_);
    sessions_[s.id] = s;
}

std::optional<session_record> session_registry::find(const std::string& tenant, const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.tenant != tenant) return std::nullopt;
    return it->second;
}

std::optional<session_record> session_registry::find_by_path(const std::string& tenant, const std::string& path) const {
    std::lock_guard lock(mutex_);
    for (const auto& [id, s] : sessions_)
        if (s.tenant == tenant && s.path == path) return s;
    return std::nullopt;
}

std::vector<session_record> session_registry::list(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    std::vector<session_record> out;
    for (const auto& [id, s] : sessions_)
        if (s.tenant == tenant) out.push_back(s);
    return out;
}

bool session_registry::update(const session_record& s) {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(s.id);
    if (it == sessions_.end() || it->second.tenant != s.tenant) return false;
    it->second = s;
    if (store_) store_->put_session(s);
    return true;
}

bool session_registry::remove(const std::string& tenant, const std::string& id) {
    std::lock_guard lock(mutex_);
    const auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.tenant != tenant) return false;
    sessions_.erase(it);
    if (store_) store_->remove_session(id);
    return true;
}

std::vector<session_record> session_registry::for_kernel(const std::string& kernel_id) const {
    std::lock_guard lock(mutex_);
    std::vector<session_record> out;
    for (const auto& [id, s] : sessions_)
        if (s.kernel_id == kernel_id) out.push_back(s);
    return out;
}

void session_registry::remove_for_kernel(const std::string& kernel_id) {
    std::lock_guard lock(mutex_);
    std::erase_if(sessions_, [&](const auto& p) { return p.second.kernel_id == kernel_id; });
}

}  // namespace cellgate::kernels
