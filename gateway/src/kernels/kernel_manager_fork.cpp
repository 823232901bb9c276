// The kernel manager's snapshots and forks. A snapshot is a copy of a
// session's workspace, taken while the session runs on (the launcher
// freezes the workspace's file system for the length of the copy, so the
// copy is consistent; the kernel's writes wait meanwhile). Sessions started
// from it each get their own copy (a reflink where the host's file system
// has them, else the blocks in use) and a new kernel with a new id, key and
// sandbox: no writable state is shared with the source or each other. A
// fork is a snapshot and its children in one call, admitted all or none.
#include "kernels/kernel_manager.hpp"
#include "kernels/node_id.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/env_rules.hpp"
#include "cellgate/protocol/message.hpp"

#include "util/log_safe.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace cellgate::kernels {

namespace asio = boost::asio;

nlohmann::json to_json(const snapshot_record& s) {
    return {{"id", s.id},
            {"name", s.name},
            {"tenant", s.tenant},
            {"source", s.source},
            {"spec_name", s.spec_name},
            {"env", s.env},
            {"policy", policy_to_json(s.policy)},
            {"created_ms", std::chrono::duration_cast<std::chrono::milliseconds>(s.created.time_since_epoch()).count()},
            {"bytes", s.bytes},
            {"disk_bytes", s.disk_bytes},
            {"reflinked", s.reflinked},
            {"mode", s.mode}};
}

snapshot_record snapshot_from_json(const nlohmann::json& j, const kernel_policy& fallback) {
    snapshot_record s;
    s.id = j.at("id").get<std::string>();
    s.name = j.value("name", "");
    s.tenant = j.at("tenant").get<std::string>();
    s.source = j.value("source", "");
    s.spec_name = j.at("spec_name").get<std::string>();
    s.env = j.value("env", std::map<std::string, std::string>{});
    s.policy = policy_from_json(j.value("policy", nlohmann::json::object()), fallback);
    s.created = std::chrono::system_clock::time_point(std::chrono::milliseconds(j.value("created_ms", 0LL)));
    s.bytes = j.value("bytes", std::uint64_t{0});
    s.disk_bytes = j.value("disk_bytes", std::uint64_t{0});
    s.reflinked = j.value("reflinked", false);
    s.mode = j.value("mode", "files");
    return s;
}

void kernel_manager::snapshot(const kernel_ptr& k, const std::string& name, done_snapshot callback) {
    snapshot_record s;
    s.id = make_node_id();
    s.name = name.empty() ? s.id : name;
    s.tenant = k->tenant();
    s.source = k->id();
    s.spec_name = k->spec_name();
    s.policy = k->policy();
    // A refusal is decided under the lock and answered after it: the callback
    // may call back into the manager.
    std::optional<failure> refused;
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        std::size_t mine = 0;
        for (const auto& [id, other] : snapshots_) mine += other.tenant == s.tenant ? 1U : 0U;
        if (it == kernels_.end()) {
            refused = failure{failure_kind::no_such_kernel, "No such session"};
        } else if (it->second.busy_lifecycle) {
            refused = failure{failure_kind::busy, "The session is restarting, pausing or resuming; "
                                                  "try the snapshot again in a moment"};
        } else if (config_.max_snapshots_per_tenant > 0 && mine >= config_.max_snapshots_per_tenant) {
            refused = failure{failure_kind::over_quota, "Snapshot limit reached for this token (" +
                                                            std::to_string(config_.max_snapshots_per_tenant) +
                                                            "); delete one first: DELETE /v1/snapshots/{id}"};
        } else {
            s.env = it->second.env;
            // Counted (and unlisted) from now: concurrent snapshots cannot race past the limit.
            s.mode.clear();
            snapshots_.emplace(s.id, s);
            ++copying_[k->id()];
        }
    }
    if (refused) return callback(std::move(refused), {});
    launches_.submit(k->tenant(), [this, k, s, callback = std::move(callback)]() mutable {
        std::optional<failure> f;
        try {
            const auto info = launcher_.snapshot_workspace(k->id(), s.id);
            s.bytes = info.bytes;
            s.disk_bytes = info.disk_bytes;
            s.reflinked = info.reflinked;
            s.created = std::chrono::system_clock::now();
            s.mode = "files";
            spdlog::info("kernel {}: snapshot {} taken ({} MiB, {} on disk; writes waited {} ms)", k->id(), s.id,
                         s.bytes >> 20, s.reflinked ? "shared blocks" : std::to_string(s.disk_bytes >> 20) + " MiB",
                         static_cast<long long>(info.ms));
        } catch (const std::exception& e) {
            spdlog::error("kernel {}: snapshot failed: {}", k->id(), util::log_safe(e.what()));
            f = failure{failure_kind::start_failed, std::string("The snapshot could not be taken: ") + e.what()};
        }
        {
            std::lock_guard lock(mutex_);
            if (--copying_[k->id()] == 0) copying_.erase(k->id());
            if (f) snapshots_.erase(s.id);
            else snapshots_[s.id] = s;
        }
        copy_done_.notify_all();
        if (!f && store_) store_->put_record({"snapshot", s.id, "", to_json(s)});
        callback(std::move(f), s);
    });
}

void kernel_manager::wait_for_copies(const std::string& kernel_id) {
    std::unique_lock lock(mutex_);
    copy_done_.wait(lock, [&] { return copying_.count(kernel_id) == 0; });
}

std::optional<snapshot_record> kernel_manager::find_snapshot(const std::string& tenant, const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = snapshots_.find(id);
    if (it == snapshots_.end() || it->second.tenant != tenant || it->second.mode.empty()) return std::nullopt;
    return it->second;
}

std::vector<snapshot_record> kernel_manager::snapshots(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    std::vector<snapshot_record> out;
    for (const auto& [id, s] : snapshots_)
        if (s.tenant == tenant && !s.mode.empty()) out.push_back(s);
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.created < b.created; });
    return out;
}

void kernel_manager::delete_snapshot(const std::string& tenant, const std::string& id, done callback) {
    {
        std::lock_guard lock(mutex_);
        const auto it = snapshots_.find(id);
        if (it == snapshots_.end() || it->second.tenant != tenant || it->second.mode.empty())
            return callback(failure{failure_kind::no_such_kernel, "No such snapshot"});
        if (starting_from_[id] > 0)
            return callback(failure{failure_kind::busy, "Sessions are starting from this snapshot; try again once they run"});
        starting_from_.erase(id);
        snapshots_.erase(it);
    }
    if (store_) store_->remove_record("snapshot", id);
    asio::post(launch_pool_, [this, id, callback = std::move(callback)] {
        try {
            launcher_.remove_snapshot(id);
        } catch (const std::exception& e) {
            spdlog::error("snapshot {}: removing it failed: {}", id, e.what());
        }
        callback(std::nullopt);
    });
}

void kernel_manager::adopt_snapshot(const snapshot_record& s) {
    std::lock_guard lock(mutex_);
    snapshots_.insert_or_assign(s.id, s);
}

namespace {

// The children of one start from a snapshot, gathered: the caller hears once,
// with all of them or with the first failure (the others are then removed).
struct child_batch {
    std::mutex mutex;
    std::vector<kernel_ptr> started;
    std::size_t count = 0, left = 0;
    std::optional<failure> first;
    kernel_manager::done_kernels callback;
};

}  // namespace

void kernel_manager::start_from_snapshot(const std::string& tenant, const std::string& snapshot_id, std::size_t count,
                                         std::optional<kernel_policy> policy, done_kernels callback) {
    const auto s = find_snapshot(tenant, snapshot_id);
    if (!s) return callback(failure{failure_kind::no_such_kernel, "No such snapshot: '" + snapshot_id + "'"}, {});
    admit(tenant, s->spec_name, s->env, count, [this, snap = *s, count, policy, callback](std::optional<failure> refused) {
        if (refused) return callback(std::move(refused), {});
        start_admitted_from(snap, count, policy, callback);
    });
}

void kernel_manager::start_admitted_from(const snapshot_record& snap, std::size_t count,
                                         std::optional<kernel_policy> policy, done_kernels callback) {
    const auto& tenant = snap.tenant;
    {
        std::lock_guard lock(mutex_);
        starting_from_[snap.id] += count;
    }
    auto batch = std::make_shared<child_batch>();
    batch->count = batch->left = count;
    batch->callback = std::move(callback);
    auto p = policy.value_or(snap.policy);
    p.volumes.clear();  // a snapshot holds the workspace only; volumes have one writer
    const nlohmann::json origin = {{"snapshot", snap.id}, {"source", snap.source}, {"mode", snap.mode}};
    for (std::size_t i = 0; i < count; ++i) {
        auto k = std::make_shared<kernel>(make_node_id(), snap.spec_name, tenant, reactor_, config_.kernel, metrics_);
        k->set_policy(p);
        k->set_origin(origin);
        auto spec = spec_for(*k, snap.env);
        spec.from_snapshot = snap.id;
        launches_.submit(tenant, [this, k, spec, env = snap.env, batch, sid = snap.id] {
            launch_new(k, spec, env, [this, batch, sid](std::optional<failure> f, kernel_ptr child) {
                std::vector<kernel_ptr> started;
                std::optional<failure> first;
                done_kernels cb;
                {
                    std::lock_guard lock(batch->mutex);
                    if (f && !batch->first) batch->first = std::move(f);
                    if (child) batch->started.push_back(child);
                    if (--batch->left > 0) return;
                    started = batch->started;
                    first = batch->first;
                    cb = std::move(batch->callback);
                }
                {
                    std::lock_guard lock(mutex_);
                    if (auto it = starting_from_.find(sid); it != starting_from_.end())
                        if ((it->second -= std::min(it->second, batch->count)) == 0) starting_from_.erase(it);
                }
                if (first) {
                    // Nothing half-made: the children that did start go again.
                    for (const auto& c : started) shutdown(c, [](std::optional<failure>) {}, "a sibling failed to start");
                    return cb(std::move(first), {});
                }
                cb(std::nullopt, std::move(started));
            });
        });
    }
}

void kernel_manager::fork(const kernel_ptr& k, std::size_t count, const std::string& name, done_fork callback) {
    // Admitted before the snapshot is taken: past the quota (this node's or
    // the cluster's) nothing is made at all, and the places are the children's.
    admit(k->tenant(), k->spec_name(), {}, count, [this, k, count, name, callback](std::optional<failure> refused) {
        if (refused) return callback(std::move(refused), {}, {});
        snapshot(k, name, [this, k, count, callback](std::optional<failure> f, snapshot_record s) {
            if (f) {
                {
                    std::lock_guard lock(mutex_);
                    for (std::size_t i = 0; i < count; ++i) admission_.release(k->tenant());
                }
                return callback(std::move(f), {}, {});
            }
            start_admitted_from(s, count, std::nullopt,
                                [this, s, callback](std::optional<failure> f2, std::vector<kernel_ptr> children) {
                                    if (f2) {
                                        // The snapshot was for these children only.
                                        delete_snapshot(s.tenant, s.id, [](std::optional<failure>) {});
                                        return callback(std::move(f2), {}, {});
                                    }
                                    callback(std::nullopt, s, std::move(children));
                                });
        });
    });
}

}  // namespace cellgate::kernels
