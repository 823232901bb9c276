#include "kernels/launch_gate.hpp"

#include <algorithm>

namespace cellgate::kernels {

launch_gate::launch_gate(std::size_t per_tenant, poster post)
    : per_tenant_(std::max<std::size_t>(1, per_tenant)), post_(std::move(post)) {}

void launch_gate::submit(const std::string& tenant, job work) {
    {
        std::lock_guard lock(mutex_);
        auto& l = lanes_[tenant];
        if (l.running >= per_tenant_) {
            l.queue.push_back(std::move(work));
            return;
        }
        ++l.running;
    }
    run(tenant, std::move(work));
}

void launch_gate::run(const std::string& tenant, job work) {
    post_([this, tenant, work = std::move(work)] {
        // Launch jobs catch their own errors; the slot is freed whatever happens.
        try {
            work();
        } catch (...) {
        }
        finished(tenant);
    });
}

void launch_gate::finished(const std::string& tenant) {
    job next;
    {
        std::lock_guard lock(mutex_);
        const auto it = lanes_.find(tenant);
        if (it == lanes_.end()) return;
        auto& l = it->second;
        if (l.queue.empty()) {
            if (--l.running == 0) lanes_.erase(it);  // idle tenants cost nothing
            return;
        }
        next = std::move(l.queue.front());  // the slot passes straight to the next one
        l.queue.pop_front();
    }
    run(tenant, std::move(next));
}

std::size_t launch_gate::in_flight(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    const auto it = lanes_.find(tenant);
    return it == lanes_.end() ? 0 : it->second.running;
}

std::size_t launch_gate::waiting(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    const auto it = lanes_.find(tenant);
    return it == lanes_.end() ? 0 : it->second.queue.size();
}

std::size_t launch_gate::waiting_total() const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [t, l] : lanes_) n += l.queue.size();
    return n;
}

}  // namespace cellgate::kernels
