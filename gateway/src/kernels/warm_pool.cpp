#include "kernels/warm_pool.hpp"

#include <algorithm>

namespace cellgate::kernels {

warm_pool::warm_pool(std::map<std::string, target> targets, std::size_t concurrency,
                     std::chrono::seconds growth_window)
    : targets_(std::move(targets)), concurrency_(std::max<std::size_t>(1, concurrency)),
      growth_window_(growth_window) {
    for (auto& [name, t] : targets_) t.max = std::max(t.max, t.base);
}

warm_pool::warm_pool(const std::map<std::string, std::size_t>& targets, std::size_t concurrency)
    : warm_pool(
          [&] {
              std::map<std::string, target> t;
              for (const auto& [name, n] : targets) t[name] = {n, n};
              return t;
          }(),
          concurrency) {}

std::size_t warm_pool::starting_total() const {
    std::size_t n = 0;
    for (const auto& [name, k] : starting_) n += k;
    return n;
}

std::size_t warm_pool::demand_total() const {
    std::size_t n = 0;
    for (const auto& [name, k] : demand_) n += k;
    return n;
}

std::size_t warm_pool::waiting() const {
    std::size_t n = 0;
    for (const auto& [name, q] : waiting_) n += q.size();
    return n;
}

std::size_t warm_pool::ready() const {
    std::size_t n = 0;
    for (const auto& [name, q] : ready_) n += q.size();
    return n;
}

void warm_pool::forget_old_misses(const std::string& spec, clock::time_point now) {
    auto& q = misses_at_[spec];
    while (!q.empty() && now - q.front() >= growth_window_) q.pop_front();
}

std::size_t warm_pool::target_of(const std::string& spec, clock::time_point now) {
    const auto t = targets_.find(spec);
    if (t == targets_.end()) return 0;
    forget_old_misses(spec, now);
    if (t->second.idle_drop.count() > 0 && now - t->second.used >= t->second.idle_drop) return 0;
    return t->second.base + std::min(t->second.max - t->second.base, misses_at_[spec].size());
}

std::vector<warm_pool::start> warm_pool::plan(clock::time_point now, std::size_t room) {
    std::vector<start> to_start;
    if (waiting() > 0) {
        // Claims first: enough starts under way for every waiter (refills
        // already running count: their kernels go to waiters too), at most
        // `concurrency` of them at once. No refill while anyone waits.
        auto running = demand_total();
        for (const auto& [name, q] : waiting_) {
            while (q.size() > starting_[name] + demand_[name] && running < concurrency_) {
                ++demand_[name];
                ++running;
                to_start.push_back({name, true});
            }
        }
        return to_start;
    }
    if (now < paused_until_) return to_start;
    auto starting = starting_total();
    for (const auto& [name, t] : targets_) {
        const auto wanted = target_of(name, now);
        // A warm kernel is a kernel: the total limit applies to the pool too.
        while (ready_[name].size() + starting_[name] < wanted && starting < concurrency_ && starting < room) {
            ++starting_[name];
            ++starting;
            to_start.push_back({name, false});
        }
    }
    return to_start;
}

namespace {

// The oldest waiter of the tenant with the fewest waiting.
warm_pool::waiter pick(std::deque<warm_pool::waiter>& q) {
    std::map<std::string, std::size_t> per_tenant;
    for (const auto& w : q) ++per_tenant[w.tenant];
    auto best = q.begin();
    for (auto it = q.begin(); it != q.end(); ++it)
        if (per_tenant[it->tenant] < per_tenant[best->tenant]) best = it;
    auto w = std::move(*best);
    q.erase(best);
    return w;
}

}  // namespace

std::optional<warm_pool::waiter> warm_pool::start_ended(const std::string& spec, bool demand, kernel_ptr ready) {
    if (auto& n = demand ? demand_[spec] : starting_[spec]; n > 0) --n;
    auto& q = waiting_[spec];
    if (ready) {
        if (!q.empty()) {
            ++waited_;
            return pick(q);
        }
        ready_[spec].push_back(std::move(ready));
        return std::nullopt;
    }
    // A start made for claims failed: one of them hears so (as its own cold
    // start's failure would have told it); a pool start's failure tells nobody.
    if (demand && !q.empty()) return pick(q);
    return std::nullopt;
}

void warm_pool::start_failed(const std::string& spec, clock::time_point now) {
    if (auto& n = starting_[spec]; n > 0) --n;
    ++failures_;
    paused_until_ = now + failure_pause;
}

bool warm_pool::has_pool(const std::string& spec) const {
    const auto t = targets_.find(spec);
    return t != targets_.end() && t->second.max > 0;
}

kernel_ptr warm_pool::take(const std::string& spec, const std::function<bool(const kernel&)>& usable,
                           clock::time_point now) {
    if (const auto t = targets_.find(spec); t != targets_.end()) t->second.used = now;
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
    if (has_pool(spec)) {
        ++misses_;
        // The miss raises the target for the growth window (bounded by the max).
        const auto& t = targets_.at(spec);
        auto& q = misses_at_[spec];
        q.push_back(now);
        while (q.size() > t.max - t.base) q.pop_front();
    }
    return nullptr;
}

void warm_pool::wait(const std::string& spec, waiter w) { waiting_[spec].push_back(std::move(w)); }

std::vector<warm_pool::waiter> warm_pool::drain_waiters() {
    std::vector<waiter> all;
    for (auto& [name, q] : waiting_)
        for (auto& w : q) all.push_back(std::move(w));
    waiting_.clear();
    return all;
}

std::vector<kernel_ptr> warm_pool::trim(clock::time_point now) {
    std::vector<kernel_ptr> extra;
    for (auto& [name, q] : ready_) {
        const auto wanted = target_of(name, now);
        while (q.size() > wanted) {
            extra.push_back(std::move(q.front()));  // the longest idle goes first
            q.pop_front();
        }
    }
    return extra;
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

std::vector<kernel_ptr> warm_pool::reset(const std::string& spec, std::size_t size, clock::time_point now,
                                         std::chrono::seconds idle_drop) {
    if (size == 0) targets_.erase(spec);
    else targets_[spec] = {size, 2 * size, idle_drop, now};
    std::vector<kernel_ptr> out;
    if (const auto it = ready_.find(spec); it != ready_.end()) {
        for (auto& k : it->second) out.push_back(std::move(k));
        ready_.erase(it);
    }
    return out;
}

void warm_pool::for_each(const std::function<void(const kernel_ptr&)>& fn) const {
    for (const auto& [name, q] : ready_)
        for (const auto& k : q) fn(k);
}

void warm_pool::render(std::string& out) const {
    auto count = [](const auto& m, const std::string& name) -> std::size_t {
        const auto it = m.find(name);
        if (it == m.end()) return 0;
        if constexpr (std::is_integral_v<std::decay_t<decltype(it->second)>>) return it->second;
        else return it->second.size();
    };
    out += "# HELP cellgate_pool_ready warm kernels ready to be claimed\n# TYPE cellgate_pool_ready gauge\n";
    for (const auto& [name, t] : targets_) {
        const auto label = "{kernelspec=\"" + name + "\"} ";
        const auto raised = t.base + std::min(t.max - t.base, count(misses_at_, name));
        out += "cellgate_pool_ready" + label + std::to_string(count(ready_, name)) + "\n";
        out += "cellgate_pool_starting" + label + std::to_string(count(starting_, name) + count(demand_, name)) + "\n";
        out += "cellgate_pool_waiting" + label + std::to_string(count(waiting_, name)) + "\n";
        out += "cellgate_pool_target" + label + std::to_string(raised) + "\n";
        out += "cellgate_pool_target_max" + label + std::to_string(t.max) + "\n";
    }
    out += "# TYPE cellgate_pool_claims_total counter\ncellgate_pool_claims_total " + std::to_string(claims_) + "\n";
    out += "# TYPE cellgate_pool_misses_total counter\ncellgate_pool_misses_total " + std::to_string(misses_) + "\n";
    out += "# HELP cellgate_pool_waited_total claims that missed and were given the next kernel to start\n"
           "# TYPE cellgate_pool_waited_total counter\ncellgate_pool_waited_total " +
           std::to_string(waited_) + "\n";
    out += "# TYPE cellgate_pool_start_failures_total counter\ncellgate_pool_start_failures_total " +
           std::to_string(failures_) + "\n";
}

}  // namespace cellgate::kernels
