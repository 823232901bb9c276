#pragma once

// envd's WatchDir (and its polled twin, CreateWatcher / GetWatcherEvents /
// RemoveWatcher): changes under a directory of the sandbox's workspace, seen
// from the host with inotify. Every directory is opened beneath the workspace
// root without following a symlink (contents_store::open_directory_path) and
// watched through its /proc/self/fd link, so a kernel that plants links
// cannot make us watch anything outside its workspace. A recursive watch
// follows directories created later, up to its bound.
//
// Event names are relative to the watched directory, with E2B's types
// (EVENT_TYPE_CREATE, WRITE, REMOVE, RENAME, CHMOD), as envd's fsnotify
// reports them.
//
// A directory created or moved in under a recursive watch is followed on the
// file-I/O pool, under the sandbox's tenant, never on an io thread: walks
// queued while one runs are coalesced into the next, and a directory already
// watched (a subtree renamed back and forth) only has its names changed in
// memory, without a walk (security review turn 3, H3).
//
// Bounds: watched directories per watch, watches per sandbox, per tenant and
// in all (inotify instances are a host-wide resource), events waiting for a
// poller, directories waiting for a walk.

#include "contents/contents_store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace cellgate::e2b {

struct watch_limits {
    std::size_t per_sandbox = 8;
    std::size_t per_tenant = 16;  // --max-watches-per-tenant
    std::size_t total = 64;
    std::size_t directories = 4096;     // inotify watches in one recursive watch
    std::size_t queued_events = 10000;  // a polled watcher nobody polls keeps the newest
};

class dir_watch : public std::enable_shared_from_this<dir_watch> {
public:
    // {"name", "type": "EVENT_TYPE_…"} each.
    using events_fn = std::function<void(const std::vector<nlohmann::json>& events)>;
    using ended_fn = std::function<void(const std::string& why)>;

    // Runs a walk on the file-I/O pool under the sandbox's tenant; false when
    // the pool refuses it now (it is asked again shortly).
    using walk_fn = std::function<bool(std::function<void()>)>;

    // Blocking (directory walk): call on the file-I/O pool. Throws
    // contents_error (not found, not a directory) or api_exception.
    dir_watch(boost::asio::io_context& io, std::shared_ptr<contents::contents_store> store, std::string dir,
              bool recursive, const watch_limits& limits, walk_fn walk);
    ~dir_watch();

    // Streams to `on_events` (on the watch's strand) until stop() or the end
    // of the directory; or, with no callback, queues for take().
    void start(events_fn on_events, ended_fn on_end);
    std::vector<nlohmann::json> take();
    void stop();

    const std::string& id() const noexcept { return id_; }
    const std::string& kernel_id() const noexcept { return kernel_id_; }
    void set_owner(std::string kernel_id) { kernel_id_ = std::move(kernel_id); }

private:
    void add_tree(const std::string& rel, int depth);
    bool add_one(const std::string& rel);
    void follow(const std::string& rel);  // on the strand: a new directory, walked on the pool
    void kick();                          // on the strand: a walk for what is pending, unless one runs
    void walk_pending();                  // on the pool
    void rename_locked(const std::string& from, const std::string& to);
    void read();
    void handle(const char* data, std::size_t n);
    void end(const std::string& why);

    boost::asio::strand<boost::asio::io_context::executor_type> strand_;
    std::shared_ptr<contents::contents_store> store_;
    const std::string dir_;  // workspace-relative
    const bool recursive_;
    const watch_limits limits_;
    std::string id_, kernel_id_;
    int inotify_ = -1;
    std::unique_ptr<boost::asio::posix::stream_descriptor> stream_;
    walk_fn walk_;
    std::unique_ptr<boost::asio::steady_timer> retry_;
    // The pool's walks and the strand share these.
    std::mutex dirs_mutex_;
    std::map<int, std::string> dirs_;  // watch descriptor → path under dir_ ("" for dir_ itself)
    std::set<std::string> pending_;    // directories to walk
    bool walking_ = false;
    std::vector<char> buffer_;
    events_fn on_events_;
    ended_fn on_end_;
    std::atomic<bool> ended_{false};
    std::mutex mutex_;  // queue_ for take()
    std::deque<nlohmann::json> queue_;
};

// The watches of every sandbox: their bounds, the polled ones by id, and
// their end with the sandbox.
class watch_book {
public:
    explicit watch_book(watch_limits limits = {}) : limits_(limits) {}

    const watch_limits& limits() const noexcept { return limits_; }
    // Counts a new watch in, or says why not (429 for the sandbox or the
    // tenant, 503 in all).
    bool admit(const std::string& kernel_id, const std::string& tenant, unsigned& status, std::string& why);
    void add(const std::shared_ptr<dir_watch>& w);  // after admit
    void release(const std::string& kernel_id, const std::string& watch_id);  // a stream ended, or RemoveWatcher
    void cancel_admission(const std::string& kernel_id);
    std::shared_ptr<dir_watch> find(const std::string& kernel_id, const std::string& watch_id) const;
    void remove_session(const std::string& kernel_id);
    // Prometheus: cellgate_e2b_watches, cellgate_e2b_watch_tenants_at_cap.
    void render(std::string& out) const;

private:
    void give_back_locked(const std::string& kernel_id, std::size_t n);

    const watch_limits limits_;
    mutable std::mutex mutex_;
    std::map<std::string, std::map<std::string, std::shared_ptr<dir_watch>>> by_sandbox_;
    std::map<std::string, std::size_t> admitted_;  // per sandbox, including those being set up
    std::map<std::string, std::string> tenant_of_;  // sandbox → tenant, while it has any
    std::map<std::string, std::size_t> per_tenant_;
    std::size_t total_ = 0;
};

}  // namespace cellgate::e2b
