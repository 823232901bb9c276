// The kernel manager's named volumes: per tenant, by name. The launcher
// keeps each as an ext4 image of a fixed size; a session names its volumes
// at start (kernel_policy::volumes) and they are mounted at /volumes/<name>.
// A volume has at most one writer at a time (the session that mounts it
// read-write claims it from admission until it is gone); readers are not
// limited. A volume outlives every session that mounted it.
#include "kernels/kernel_manager.hpp"
#include "kernels/node_id.hpp"

#include "cellgate/protocol/message.hpp"
#include "util/log_safe.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace cellgate::kernels {

namespace asio = boost::asio;

nlohmann::json to_json(const volume_record& v) {
    return {{"id", v.id},
            {"name", v.name},
            {"tenant", v.tenant},
            {"bytes", v.bytes},
            {"created_ms", std::chrono::duration_cast<std::chrono::milliseconds>(v.created.time_since_epoch()).count()}};
}

volume_record volume_from_json(const nlohmann::json& j) {
    volume_record v;
    v.id = j.at("id").get<std::string>();
    v.name = j.at("name").get<std::string>();
    v.tenant = j.at("tenant").get<std::string>();
    v.bytes = j.value("bytes", std::uint64_t{0});
    v.created = std::chrono::system_clock::time_point(std::chrono::milliseconds(j.value("created_ms", 0LL)));
    v.ready = true;
    return v;
}

void kernel_manager::create_volume(const std::string& tenant, const std::string& name, std::uint64_t bytes,
                                   done_volume callback) {
    volume_record v;
    v.id = make_node_id();
    v.name = name;
    v.tenant = tenant;
    v.bytes = bytes;
    {
        std::lock_guard lock(mutex_);
        std::size_t count = 0;
        std::uint64_t total = 0;
        for (const auto& [id, other] : volumes_) {
            if (other.tenant != tenant) continue;
            if (other.name == name)
                return callback(failure{failure_kind::busy, "A volume named '" + name + "' exists already"}, {});
            ++count;
            total += other.bytes;
        }
        if (config_.max_volumes_per_tenant > 0 && count >= config_.max_volumes_per_tenant)
            return callback(failure{failure_kind::over_quota, "Volume limit reached for this token (" +
                                                                  std::to_string(config_.max_volumes_per_tenant) +
                                                                  " volumes); delete one first"},
                            {});
        if (config_.max_volume_bytes_per_tenant > 0 && total + bytes > config_.max_volume_bytes_per_tenant)
            return callback(failure{failure_kind::over_quota,
                                    "Volume quota exceeded for this token: " + std::to_string(total >> 20) +
                                        " MiB in volumes already, " + std::to_string(bytes >> 20) +
                                        " MiB more asked for, " +
                                        std::to_string(config_.max_volume_bytes_per_tenant >> 20) + " MiB allowed"},
                            {});
        volumes_.emplace(v.id, v);  // counted (not listed) while it is made
    }
    asio::post(launch_pool_, [this, v, callback = std::move(callback)]() mutable {
        std::optional<failure> f;
        try {
            launcher_.create_volume(v.id, v.bytes);
            v.created = std::chrono::system_clock::now();
            v.ready = true;
        } catch (const std::exception& e) {
            spdlog::error("volume {}: creating it failed: {}", v.id, util::log_safe(e.what()));
            f = failure{failure_kind::start_failed, std::string("The volume could not be made: ") + e.what()};
        }
        {
            std::lock_guard lock(mutex_);
            if (f) volumes_.erase(v.id);
            else volumes_[v.id] = v;
        }
        if (!f && store_) store_->put_record({"volume", v.id, "", to_json(v)});
        callback(std::move(f), v);
    });
}

std::optional<volume_record> kernel_manager::find_volume(const std::string& tenant, const std::string& name) const {
    std::lock_guard lock(mutex_);
    for (const auto& [id, v] : volumes_)
        if (v.tenant == tenant && v.name == name && v.ready) return v;
    return std::nullopt;
}

std::vector<volume_record> kernel_manager::volumes(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    std::vector<volume_record> out;
    for (const auto& [id, v] : volumes_)
        if (v.tenant == tenant && v.ready) out.push_back(v);
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
}

std::vector<std::pair<std::string, volume_attachment>> kernel_manager::volume_users(const std::string& volume_id) const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, volume_attachment>> out;
    for (const auto& [id, r] : kernels_)
        for (const auto& v : r.k->policy().volumes)
            if (v.id == volume_id) out.emplace_back(id, v);
    return out;
}

launcher::volume_info kernel_manager::volume_usage(const std::string& volume_id) {
    try {
        return launcher_.volume_usage(volume_id);
    } catch (const std::exception& e) {
        spdlog::warn("volume {}: its use could not be read: {}", volume_id, util::log_safe(e.what()));
        return {};
    }
}

void kernel_manager::delete_volume(const std::string& tenant, const std::string& name, done callback) {
    std::string id;
    {
        std::lock_guard lock(mutex_);
        for (const auto& [vid, v] : volumes_)
            if (v.tenant == tenant && v.name == name && v.ready) id = vid;
        if (id.empty()) return callback(failure{failure_kind::no_such_kernel, "No such volume: '" + name + "'"});
        std::vector<std::string> users;
        for (const auto& [kid, r] : kernels_)
            for (const auto& v : r.k->policy().volumes)
                if (v.id == id) users.push_back(kid);
        if (const auto w = volume_writers_.find(id); w != volume_writers_.end() && users.empty()) users.push_back(w->second);
        if (!users.empty())
            return callback(failure{failure_kind::busy, "Volume '" + name + "' is mounted by session " + users.front() +
                                                            (users.size() > 1 ? " and " + std::to_string(users.size() - 1) + " more" : "") +
                                                            "; end those sessions first"});
        volumes_.erase(id);
    }
    if (store_) store_->remove_record("volume", id);
    asio::post(launch_pool_, [this, id, callback = std::move(callback)] {
        try {
            launcher_.remove_volume(id);
        } catch (const std::exception& e) {
            spdlog::error("volume {}: removing it failed: {}", id, e.what());
        }
        callback(std::nullopt);
    });
}

void kernel_manager::adopt_volume(const volume_record& v) {
    std::lock_guard lock(mutex_);
    volumes_.insert_or_assign(v.id, v);
}

std::optional<failure> kernel_manager::claim_volumes(const std::string& tenant, const std::string& kernel_id,
                                                     const std::vector<volume_attachment>& volumes) {
    std::lock_guard lock(mutex_);
    for (const auto& v : volumes) {
        const auto it = volumes_.find(v.id);
        if (it == volumes_.end() || it->second.tenant != tenant || !it->second.ready)
            return failure{failure_kind::no_such_kernel, "No such volume: '" + v.name + "'"};
        if (v.read_only) continue;
        if (const auto w = volume_writers_.find(v.id); w != volume_writers_.end() && w->second != kernel_id)
            return failure{failure_kind::busy, "Volume '" + v.name + "' is mounted read-write by session " + w->second +
                                                   "; a volume has one writer at a time: mount it read_only, or "
                                                   "end that session first"};
    }
    for (const auto& v : volumes)
        if (!v.read_only) volume_writers_[v.id] = kernel_id;
    return std::nullopt;
}

void kernel_manager::release_volumes_locked(const std::string& kernel_id) {
    for (auto it = volume_writers_.begin(); it != volume_writers_.end();)
        it = it->second == kernel_id ? volume_writers_.erase(it) : std::next(it);
}

void kernel_manager::reclaim_volumes_locked(const std::string& kernel_id, const std::vector<volume_attachment>& volumes) {
    for (const auto& v : volumes)
        if (!v.read_only) volume_writers_[v.id] = kernel_id;
}

}  // namespace cellgate::kernels
