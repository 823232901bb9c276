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
// Bounds: watched directories per watch, watches per sandbox and in all
// (inotify instances are a host-wide resource), events waiting for a poller.

#include "contents/contents_store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/strand.hpp>

#include <nlohmann/json.hpp>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cellgate::e2b {

struct watch_limits {
    std::size_t per_sandbox = 8;
    std::size_t total = 64;
    std::size_t directories = 4096;     // inotify watches in one recursive watch
    std::size_t queued_events = 10000;  // a polled watcher nobody polls keeps the newest
};

class dir_watch : public std::enable_shared_from_this<dir_watch> {
public:
    // {"name", "type": "EVENT_TYPE_…"} each.
    using events_fn = std::function<void(const std::vector<nlohmann::json>& events)>;
    using ended_fn = std::function<void(const std::string& why)>;

    // Blocking (directory walk): call on the file-I/O pool. Throws
    // contents_error (not found, not a directory) or api_exception.
    dir_watch(boost::asio::io_context& io, std::shared_ptr<contents::contents_store> store, std::string dir,
              bool recursive, const watch_limits& limits);
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
    std::map<int, std::string> dirs_;  // watch descriptor → path under dir_ ("" for dir_ itself)
    std::vector<char> buffer_;
    events_fn on_events_;
    ended_fn on_end_;
    bool ended_ = false;
    std::mutex mutex_;  // queue_ for take()
    std::deque<nlohmann::json> queue_;
};

// The watches of every sandbox: their bounds, the polled ones by id, and
// their end with the sandbox.
class watch_book {
public:
    explicit watch_book(watch_limits limits = {}) : limits_(limits) {}

    const watch_limits& limits() const noexcept { return limits_; }
    // Counts a new watch in, or says why not (429 for the sandbox, 503 in all).
    bool admit(const std::string& kernel_id, unsigned& status, std::string& why);
    void add(const std::shared_ptr<dir_watch>& w);  // after admit
    void release(const std::string& kernel_id, const std::string& watch_id);  // a stream ended, or RemoveWatcher
    void cancel_admission(const std::string& kernel_id);
    std::shared_ptr<dir_watch> find(const std::string& kernel_id, const std::string& watch_id) const;
    void remove_session(const std::string& kernel_id);

private:
    const watch_limits limits_;
    mutable std::mutex mutex_;
    std::map<std::string, std::map<std::string, std::shared_ptr<dir_watch>>> by_sandbox_;
    std::map<std::string, std::size_t> admitted_;  // per sandbox, including those being set up
    std::size_t total_ = 0;
};

}  // namespace cellgate::e2b
