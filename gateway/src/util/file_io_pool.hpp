#pragma once

// A bounded pool of threads for blocking file-system work (contents and
// /v1 file handlers, workspace snapshots), so a slow request (a recursive
// delete of a million files, a big read) never holds an io thread that
// every other connection needs. Fair between tenants: one tenant runs at
// most `per_tenant_running` jobs at once, and the threads take tenants
// round-robin, so another tenant always finds a thread soon. Jobs past the
// queue bounds are refused (the caller answers 429 or 503), never queued
// without limit.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cellgate::util {

class file_io_pool {
public:
    struct options {
        std::size_t threads = 4;
        std::size_t per_tenant_running = 2;
        std::size_t per_tenant_queued = 64;
        std::size_t max_queued = 1024;
    };
    enum class admission { accepted, tenant_busy, pool_busy };

    explicit file_io_pool(options o);
    ~file_io_pool();  // stop()
    // Runs what is queued, then joins the threads. Call it before what the
    // jobs use (handlers' services, the io_context) goes away.
    void stop();
    file_io_pool(const file_io_pool&) = delete;
    file_io_pool& operator=(const file_io_pool&) = delete;

    // Queues `job` for `tenant`. A job must not throw (what it throws is logged and dropped).
    admission submit(const std::string& tenant, std::function<void()> job);

    // For tests and metrics.
    std::size_t queued() const;

private:
    struct tenant_jobs {
        std::deque<std::function<void()>> pending;
        std::size_t running = 0;
    };
    void run_thread();
    // The next tenant (round-robin) with a pending job and a free slot, or end().
    std::map<std::string, tenant_jobs>::iterator next_runnable_locked();

    const options options_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::map<std::string, tenant_jobs> tenants_;
    std::string last_tenant_;  // where the round-robin resumes
    std::size_t queued_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace cellgate::util
