#pragma once

// The launcher's count of the processes it runs through exec(): per sandbox,
// the handles' channels that are still live and the starts under way. The
// launcher holds one (launcher::impl::execs); exec() reserves a place in it,
// and a sandbox's end (remove, checkpoint) signals what it lists.

#include "cellgate/launcher/launch_error.hpp"
#include "exec_channel.hpp"

#include <cerrno>
#include <cstdint>
#include <cstddef>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cellgate::launcher {

// The processes run through exec(), per sandbox, as the handles' channels
// (watched, never kept alive: a dropped handle leaves at once), and the
// starts under way, which count too, so that two at once cannot both take
// the last place.
class exec_registry {
public:
    class reservation {
    public:
        reservation(exec_registry& r, std::string id) : r_(&r), id_(std::move(id)) {}
        reservation(const reservation&) = delete;
        reservation& operator=(const reservation&) = delete;
        ~reservation() {
            if (r_ != nullptr) r_->settle(id_, {});
        }
        void commit(std::weak_ptr<exec_channel::state> watch) { std::exchange(r_, nullptr)->settle(id_, std::move(watch)); }

    private:
        exec_registry* r_;
        std::string id_;
    };

    reservation reserve(const std::string& id, std::uint32_t per_sandbox, std::uint32_t total) {
        std::lock_guard lock(mutex_);
        std::size_t all = 0;
        for (auto it = execs_.begin(); it != execs_.end();) {
            auto& list = it->second;
            std::erase_if(list, [](const std::weak_ptr<exec_channel::state>& w) {
                const auto s = w.lock();
                return !s || s->ended();
            });
            all += list.size();
            it = list.empty() ? execs_.erase(it) : std::next(it);
        }
        for (const auto& [sandbox, n] : starting_) all += n;
        const auto here = (execs_.count(id) != 0 ? execs_[id].size() : 0) + starting_[id];
        if (here >= per_sandbox || all >= total) {
            if (starting_[id] == 0) starting_.erase(id);
            throw launch_error("exec-limit",
                               here >= per_sandbox
                                   ? "sandbox '" + id + "' already runs " + std::to_string(here) +
                                         " processes through exec (at most " + std::to_string(per_sandbox) + ")"
                                   : "this launcher already runs " + std::to_string(all) +
                                         " processes through exec (at most " + std::to_string(total) + ")",
                               EAGAIN);
        }
        ++starting_[id];
        return reservation(*this, id);
    }

    std::vector<std::shared_ptr<exec_channel::state>> live(const std::string& id) {
        std::lock_guard lock(mutex_);
        std::vector<std::shared_ptr<exec_channel::state>> out;
        if (const auto it = execs_.find(id); it != execs_.end())
            for (const auto& w : it->second)
                if (auto s = w.lock()) out.push_back(std::move(s));
        return out;
    }

private:
    void settle(const std::string& id, std::weak_ptr<exec_channel::state> watch) {
        std::lock_guard lock(mutex_);
        if (--starting_[id] == 0) starting_.erase(id);
        if (!watch.expired()) execs_[id].push_back(std::move(watch));
    }

    std::mutex mutex_;
    std::map<std::string, std::vector<std::weak_ptr<exec_channel::state>>> execs_;
    std::map<std::string, std::uint32_t> starting_;
};

}  // namespace cellgate::launcher
