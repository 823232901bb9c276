#include "kernels/warm_pool.hpp"

#include <algorithm>

namespace cellgate::kernels {

std::size_t warm_pool::starting_total() const {
    std::size_t n = 0;
    for (const auto& [name, k] : starting_) n += k;
    return n;
}

std::vector<std::string> warm_pool::plan(clock::time_point now, std::size_t room) {
    std::vector<std::string> to_start;
    if (now < paused_until_) return to_start;
    auto starting = starting_total();
    for (const auto& [name, target] : targets_) {
        // A warm kernel is a kernel: the total limit applies to the pool too.
        while (ready_[name].size() + starting_[name] < target && starting < concurrency_ && starting < room) {
            ++starting_[name];
            ++starting;
            to_start.push_back(name);
        }
    }
    return to_start;
}

void warm_pool::start_ended(const std::string& spec, kernel_ptr ready) {
    if (auto& n = starting_[spec]; n > 0) --n;
    if (ready) ready_[spec].push_back(std::move(ready));
}

void warm_pool::start_failed(const std::string& spec, clock::time_point now) {
    start_ended(spec, nullptr);
    ++failures_;
    paused_until_ = now + failure_pause;
}

kernel_ptr warm_pool::take(const std::string& spec, const std::function<bool(const kernel&)>& usable) {
    if (const auto it = ready_.find(spec); it != ready_.end()) {
        while (!it->second.empty()) {
            auto k = std::move(it->second.front());
            it->second.pop_front();
            if (usable(*k)) {
                ++claims_;
                return k;
            }
            k->close("warm kernel was not ready");  // died meanwhile: its watcher cleans up
        }
    }
    if (const auto t = targets_.find(spec); t != targets_.end() && t->second > 0) ++misses_;
    return nullptr;
}

bool warm_pool::holds(const kernel_ptr& k) const {
    const auto it = ready_.find(k->spec_name());
    return it != ready_.end() && std::find(it->second.begin(), it->second.end(), k) != it->second.end();
}

bool warm_pool::remove(const kernel_ptr& k) {
    const auto it = ready_.find(k->spec_name());
    if (it == ready_.end()) return false;
    const auto at = std::find(it->second.begin(), it->second.end(), k);
    if (at == it->second.end()) return false;
    it->second.erase(at);
    return true;
}

std::vector<kernel_ptr> warm_pool::drain() {
    std::vector<kernel_ptr> all;
    for (auto& [name, q] : ready_)
        for (auto& k : q) all.push_back(std::move(k));
    ready_.clear();
    return all;
}

void warm_pool::for_each(const std::function<void(const kernel_ptr&)>& fn) const {
    for (const auto& [name, q] : ready_)
        for (const auto& k : q) fn(k);
}

void warm_pool::render(std::string& out) const {
    out += "# HELP cellgate_pool_ready warm kernels ready to be claimed\n# TYPE cellgate_pool_ready gauge\n";
    for (const auto& [name, target] : targets_) {
        const auto ready = ready_.count(name) ? ready_.at(name).size() : 0;
        const auto starting = starting_.count(name) ? starting_.at(name) : 0;
        out += "cellgate_pool_ready{kernelspec=\"" + name + "\"} " + std::to_string(ready) + "\n";
        out += "cellgate_pool_starting{kernelspec=\"" + name + "\"} " + std::to_string(starting) + "\n";
        out += "cellgate_pool_target{kernelspec=\"" + name + "\"} " + std::to_string(target) + "\n";
    }
    out += "# TYPE cellgate_pool_claims_total counter\ncellgate_pool_claims_total " + std::to_string(claims_) + "\n";
    out += "# TYPE cellgate_pool_misses_total counter\ncellgate_pool_misses_total " + std::to_string(misses_) + "\n";
    out += "# TYPE cellgate_pool_start_failures_total counter\ncellgate_pool_start_failures_total " +
           std::to_string(failures_) + "\n";
}

}  // namespace cellgate::kernels
