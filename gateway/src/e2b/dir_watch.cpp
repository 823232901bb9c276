#include "e2b/dir_watch.hpp"

#include "e2b/sandbox_book.hpp"
#include "util/api_error.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cellgate::e2b {

using nlohmann::json;
namespace asio = boost::asio;

namespace {

constexpr std::uint32_t watch_mask = IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB |
                                     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
constexpr int max_depth = 32;

// As envd's fsnotify: one E2B type per inotify event (nullptr: not reported).
const char* event_type(std::uint32_t mask) {
    if (mask & (IN_CREATE | IN_MOVED_TO)) return "EVENT_TYPE_CREATE";
    if (mask & IN_MODIFY) return "EVENT_TYPE_WRITE";
    if (mask & IN_DELETE) return "EVENT_TYPE_REMOVE";
    if (mask & IN_MOVED_FROM) return "EVENT_TYPE_RENAME";
    if (mask & IN_ATTRIB) return "EVENT_TYPE_CHMOD";
    return nullptr;
}

std::string joined(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + "/" + b; }

}  // namespace

dir_watch::dir_watch(asio::io_context& io, std::shared_ptr<contents::contents_store> store, std::string dir,
                     bool recursive, const watch_limits& limits, walk_fn walk)
    : strand_(asio::make_strand(io)), store_(std::move(store)), dir_(std::move(dir)), recursive_(recursive),
      limits_(limits), id_(make_access_token().substr(0, 32)), walk_(std::move(walk)), buffer_(64u << 10) {
    inotify_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_ < 0) {
        const int err = errno;
        spdlog::warn("e2b: inotify_init1: {}", std::strerror(err));
        throw api_exception(503, "No directory watch can be set up now (the host's inotify instances are used up); try again later");
    }
    try {
        if (!add_one("")) throw api_exception(400, "Not a directory");
        if (recursive_) add_tree("", 0);
    } catch (...) {
        ::close(inotify_);
        inotify_ = -1;
        throw;
    }
}

dir_watch::~dir_watch() {
    if (stream_) {
        boost::system::error_code ignored;
        stream_->close(ignored);
    } else if (inotify_ >= 0) {
        ::close(inotify_);
    }
}

// Watches dir_/rel: opened beneath the workspace without a symlink, watched
// through its descriptor's /proc link. True when it is newly watched (its
// tree is then the caller's to walk); false when it is not there (any more),
// over the bound, or watched already (a directory moved: its names change).
bool dir_watch::add_one(const std::string& rel) {
    const auto path = joined(dir_, rel);
    int fd = -1;
    try {
        fd = store_->open_directory_path(path);
    } catch (const contents::contents_error&) {
        if (rel.empty()) throw;  // the watched directory itself: the caller says why
        return false;            // gone already, or a link: not followed
    }
    const auto link = "/proc/self/fd/" + std::to_string(fd);
    std::lock_guard lock(dirs_mutex_);
    if (inotify_ < 0) {  // ended meanwhile
        ::close(fd);
        return false;
    }
    const int wd = ::inotify_add_watch(inotify_, link.c_str(), watch_mask);
    const int err = errno;
    ::close(fd);
    if (wd < 0) {
        if (rel.empty()) {
            spdlog::warn("e2b: inotify_add_watch: {}", std::strerror(err));
            throw api_exception(err == ENOSPC ? 503 : 400, err == ENOSPC ? "The host's inotify watches are used up; try again later"
                                                                       : "The directory cannot be watched");
        }
        return false;
    }
    if (const auto it = dirs_.find(wd); it != dirs_.end()) {
        if (it->second != rel) rename_locked(std::string(it->second), rel);  // a copy: the loop changes it
        return false;
    }
    if (dirs_.size() >= limits_.directories) {
        ::inotify_rm_watch(inotify_, wd);
        return false;
    }
    dirs_[wd] = rel;
    return true;
}

// A watched directory now named `to`: its own name and its subdirectories'.
void dir_watch::rename_locked(const std::string& from, const std::string& to) {
    for (auto& [wd, name] : dirs_) {
        if (name == from) name = to;
        else if (name.size() > from.size() && name.compare(0, from.size(), from) == 0 && name[from.size()] == '/')
            name = to + name.substr(from.size());
    }
}

void dir_watch::add_tree(const std::string& rel, int depth) {
    if (depth >= max_depth || ended_) return;
    contents::listing l;
    try {
        l = store_->list(joined(dir_, rel), limits_.directories);
    } catch (const contents::contents_error&) {
        return;
    }
    for (const auto& e : l.entries) {
        if (e.type != contents::entry_type::directory) continue;
        const auto child = joined(rel, e.name);
        if (add_one(child)) add_tree(child, depth + 1);
    }
}

void dir_watch::follow(const std::string& rel) {
    {
        std::lock_guard lock(dirs_mutex_);
        if (pending_.size() >= limits_.directories) return;  // the walk under way finds it, or the bound is reached
        pending_.insert(rel);
    }
    kick();
}

void dir_watch::kick() {
    {
        std::lock_guard lock(dirs_mutex_);
        if (walking_ || pending_.empty() || ended_) return;
        walking_ = true;
    }
    if (walk_([self = shared_from_this()] { self->walk_pending(); })) return;
    // The tenant's share of the pool is busy: ask again shortly.
    {
        std::lock_guard lock(dirs_mutex_);
        walking_ = false;
    }
    if (!retry_) retry_ = std::make_unique<asio::steady_timer>(strand_);
    retry_->expires_after(std::chrono::milliseconds(200));
    retry_->async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec && !self->ended_) self->kick();
    });
}

void dir_watch::walk_pending() {
    for (;;) {
        std::set<std::string> todo;
        {
            std::lock_guard lock(dirs_mutex_);
            if (pending_.empty() || ended_) {
                walking_ = false;
                return;
            }
            todo.swap(pending_);
        }
        for (const auto& rel : todo)
            if (add_one(rel)) add_tree(rel, 1);
    }
}

void dir_watch::start(events_fn on_events, ended_fn on_end) {
    asio::post(strand_, [self = shared_from_this(), on_events = std::move(on_events), on_end = std::move(on_end)]() mutable {
        self->on_events_ = std::move(on_events);
        self->on_end_ = std::move(on_end);
        self->stream_ = std::make_unique<asio::posix::stream_descriptor>(self->strand_, self->inotify_);
        self->read();
    });
}

void dir_watch::read() {
    stream_->async_read_some(asio::buffer(buffer_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
        if (self->ended_) return;
        if (ec) return self->end(ec == asio::error::operation_aborted ? "stopped" : "the watch failed: " + ec.message());
        self->handle(self->buffer_.data(), n);
        if (!self->ended_) self->read();
    });
}

void dir_watch::handle(const char* data, std::size_t n) {
    std::vector<json> events;
    std::size_t at = 0;
    while (at + sizeof(inotify_event) <= n) {
        inotify_event ev{};
        std::memcpy(&ev, data + at, sizeof ev);
        const std::string name = ev.len > 0 ? std::string(data + at + sizeof ev, ::strnlen(data + at + sizeof ev, ev.len)) : "";
        at += sizeof ev + ev.len;
        if (ev.mask & IN_Q_OVERFLOW) {
            spdlog::info("e2b: watch {}: the kernel's event queue overflowed; some events were lost", id_);
            continue;
        }
        std::string dir;
        {
            std::lock_guard lock(dirs_mutex_);
            const auto it = dirs_.find(ev.wd);
            if (it == dirs_.end()) continue;
            dir = it->second;
            if (ev.mask & IN_IGNORED) dirs_.erase(it);
        }
        if (ev.mask & IN_IGNORED) {
            if (dir.empty()) return end("the watched directory was removed");
            continue;
        }
        if (ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
            if (dir.empty()) {
                if (!events.empty() && on_events_) on_events_(events);
                return end(ev.mask & IN_DELETE_SELF ? "the watched directory was removed" : "the watched directory was moved");
            }
            continue;  // a subdirectory's own event: its parent reported it
        }
        const char* type = event_type(ev.mask);
        if (type == nullptr || name.empty()) continue;
        const auto rel = joined(dir, name);
        events.push_back({{"name", rel}, {"type", type}});
        if (recursive_ && (ev.mask & IN_ISDIR) && (ev.mask & (IN_CREATE | IN_MOVED_TO))) follow(rel);
    }
    if (events.empty()) return;
    if (on_events_) return on_events_(events);
    std::lock_guard lock(mutex_);
    for (auto& e : events) queue_.push_back(std::move(e));
    while (queue_.size() > limits_.queued_events) queue_.pop_front();
}

std::vector<json> dir_watch::take() {
    std::lock_guard lock(mutex_);
    std::vector<json> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
    queue_.clear();
    return out;
}

void dir_watch::stop() {
    asio::post(strand_, [self = shared_from_this()] { self->end("stopped"); });
}

void dir_watch::end(const std::string& why) {
    if (ended_) return;
    ended_ = true;
    if (retry_) retry_->cancel();
    if (stream_) {
        std::lock_guard lock(dirs_mutex_);  // a walk on the pool uses inotify_ under it
        boost::system::error_code ignored;
        stream_->close(ignored);
        stream_.reset();
        inotify_ = -1;
    }
    on_events_ = nullptr;
    if (auto f = std::exchange(on_end_, nullptr)) f(why);
}

bool watch_book::admit(const std::string& kernel_id, const std::string& tenant, unsigned& status, std::string& why) {
    std::lock_guard lock(mutex_);
    if (admitted_[kernel_id] >= limits_.per_sandbox) {
        status = 429, why = "The sandbox has " + std::to_string(limits_.per_sandbox) + " directory watches already; stop one first";
        return false;
    }
    if (per_tenant_[tenant] >= limits_.per_tenant) {
        status = 429, why = "Your sandboxes have " + std::to_string(limits_.per_tenant) +
                            " directory watches already (the most a tenant may); stop one first";
        return false;
    }
    if (total_ >= limits_.total) {
        status = 503, why = "The gateway has as many directory watches as it may; try again later";
        return false;
    }
    ++admitted_[kernel_id];
    tenant_of_[kernel_id] = tenant;
    ++per_tenant_[tenant];
    ++total_;
    return true;
}

void watch_book::give_back_locked(const std::string& kernel_id, std::size_t n) {
    const auto it = admitted_.find(kernel_id);
    if (it == admitted_.end()) return;
    n = std::min(n, it->second);
    total_ -= std::min(total_, n);
    if (const auto t = tenant_of_.find(kernel_id); t != tenant_of_.end()) {
        if (const auto c = per_tenant_.find(t->second); c != per_tenant_.end()) {
            c->second -= std::min(c->second, n);
            if (c->second == 0) per_tenant_.erase(c);
        }
    }
    if ((it->second -= n) == 0) {
        admitted_.erase(it);
        tenant_of_.erase(kernel_id);
    }
}

void watch_book::cancel_admission(const std::string& kernel_id) {
    std::lock_guard lock(mutex_);
    give_back_locked(kernel_id, 1);
}

void watch_book::add(const std::shared_ptr<dir_watch>& w) {
    std::lock_guard lock(mutex_);
    by_sandbox_[w->kernel_id()][w->id()] = w;
}

void watch_book::release(const std::string& kernel_id, const std::string& watch_id) {
    {
        std::lock_guard lock(mutex_);
        const auto it = by_sandbox_.find(kernel_id);
        if (it == by_sandbox_.end() || it->second.erase(watch_id) == 0) return;
        if (it->second.empty()) by_sandbox_.erase(it);
    }
    cancel_admission(kernel_id);
}

std::shared_ptr<dir_watch> watch_book::find(const std::string& kernel_id, const std::string& watch_id) const {
    std::lock_guard lock(mutex_);
    const auto it = by_sandbox_.find(kernel_id);
    if (it == by_sandbox_.end()) return nullptr;
    const auto w = it->second.find(watch_id);
    return w == it->second.end() ? nullptr : w->second;
}

void watch_book::remove_session(const std::string& kernel_id) {
    std::map<std::string, std::shared_ptr<dir_watch>> gone;
    {
        std::lock_guard lock(mutex_);
        if (const auto it = by_sandbox_.find(kernel_id); it != by_sandbox_.end()) {
            gone = std::move(it->second);
            by_sandbox_.erase(it);
        }
        give_back_locked(kernel_id, gone.size());
    }
    for (auto& [id, w] : gone) w->stop();
}

void watch_book::render(std::string& out) const {
    std::lock_guard lock(mutex_);
    std::size_t at_cap = 0;
    for (const auto& [tenant, n] : per_tenant_) at_cap += n >= limits_.per_tenant ? 1 : 0;
    out += "# HELP cellgate_e2b_watches Directory watches held (E2B WatchDir and CreateWatcher).\n"
           "# TYPE cellgate_e2b_watches gauge\ncellgate_e2b_watches " + std::to_string(total_) + "\n";
    out += "# HELP cellgate_e2b_watch_tenants_at_cap Tenants holding as many watches as a tenant may.\n"
           "# TYPE cellgate_e2b_watch_tenants_at_cap gauge\ncellgate_e2b_watch_tenants_at_cap " +
           std::to_string(at_cap) + "\n";
    out += "# HELP cellgate_e2b_watches_per_tenant_limit --max-watches-per-tenant.\n"
           "# TYPE cellgate_e2b_watches_per_tenant_limit gauge\ncellgate_e2b_watches_per_tenant_limit " +
           std::to_string(limits_.per_tenant) + "\n";
}

}  // namespace cellgate::e2b
