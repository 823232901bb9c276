#include "util/file_io_pool.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

namespace cellgate::util {

file_io_pool::file_io_pool(options o) : options_(o) {
    const auto n = std::max<std::size_t>(1, options_.threads);
    threads_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) threads_.emplace_back([this] { run_thread(); });
}

file_io_pool::~file_io_pool() { stop(); }

void file_io_pool::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_)
        if (t.joinable()) t.join();
}

file_io_pool::admission file_io_pool::submit(const std::string& tenant, std::function<void()> job) {
    {
        std::lock_guard lock(mutex_);
        if (queued_ >= options_.max_queued) return admission::pool_busy;
        auto& jobs = tenants_[tenant];
        if (jobs.pending.size() >= options_.per_tenant_queued) return admission::tenant_busy;
        jobs.pending.push_back(std::move(job));
        ++queued_;
    }
    wake_.notify_one();
    return admission::accepted;
}

std::size_t file_io_pool::queued() const {
    std::lock_guard lock(mutex_);
    return queued_;
}

std::map<std::string, file_io_pool::tenant_jobs>::iterator file_io_pool::next_runnable_locked() {
    if (tenants_.empty()) return tenants_.end();
    auto start = tenants_.upper_bound(last_tenant_);
    for (std::size_t i = 0; i < tenants_.size(); ++i, ++start) {
        if (start == tenants_.end()) start = tenants_.begin();
        if (!start->second.pending.empty() && start->second.running < options_.per_tenant_running) return start;
    }
    return tenants_.end();
}

void file_io_pool::run_thread() {
    std::unique_lock lock(mutex_);
    for (;;) {
        auto it = next_runnable_locked();
        if (it == tenants_.end()) {
            if (stopping_ && queued_ == 0) return;
            wake_.wait(lock);
            continue;
        }
        auto job = std::move(it->second.pending.front());
        it->second.pending.pop_front();
        ++it->second.running;
        --queued_;
        last_tenant_ = it->first;
        const std::string tenant = it->first;
        lock.unlock();
        try {
            job();
        } catch (const std::exception& e) {
            spdlog::error("file I/O job for tenant {} failed: {}", tenant, e.what());
        } catch (...) {
            spdlog::error("file I/O job for tenant {} failed", tenant);
        }
        job = nullptr;  // whatever it holds goes before the next job starts
        lock.lock();
        auto& jobs = tenants_[tenant];
        --jobs.running;
        if (jobs.running == 0 && jobs.pending.empty()) tenants_.erase(tenant);
        // A slot of this tenant is free: a thread waiting for it can go.
        wake_.notify_all();
    }
}

}  // namespace cellgate::util
