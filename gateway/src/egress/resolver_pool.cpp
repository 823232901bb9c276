#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include "egress/resolver_pool.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <functional>
#include <thread>

namespace cellgate::egress {

namespace asio = boost::asio;

struct resolver_pool::job {
    std::string host, session, tenant;
    enum class phase { queued, running, done, abandoned } at = phase::queued;
    answer result;
    std::function<void()> wake;  // tells the waiter (on its own executor)
};

struct resolver_pool::state : std::enable_shared_from_this<resolver_pool::state> {
    state(resolver_limits l, lookup_fn f) : limits(l), lookup_with(std::move(f)) {}
    resolver_limits limits;
    lookup_fn lookup_with;
    counters stats;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::shared_ptr<job>> queue;
    std::size_t idle = 0;    // workers waiting for a job
    std::size_t active = 0;  // workers not stuck in an abandoned lookup (at most limits.threads)
    std::size_t stuck = 0;   // workers still in a lookup whose waiter gave up
    std::map<std::string, std::size_t> by_session, by_tenant;
    bool stopping = false;

    static void drop(std::map<std::string, std::size_t>& m, const std::string& key) {
        const auto it = m.find(key);
        if (it != m.end() && --it->second == 0) m.erase(it);
    }
    void release(const job& j) {
        drop(by_session, j.session);
        drop(by_tenant, j.tenant);
        --stats.in_flight;
    }
    // Under the mutex: one more worker when the queue holds more jobs than
    // workers wait (one woken but not yet running counts as waiting still,
    // so two jobs behind one idle worker get a second one).
    void staff() {
        if (queue.size() <= idle || active >= limits.threads || stuck >= limits.max_stuck) return;
        ++active;
        ++stats.threads;
        std::thread([self = shared_from_this()] { self->work(); }).detach();
    }
    static answer lookup(const std::string& host) {
        answer a;
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_ADDRCONFIG;
        addrinfo* res = nullptr;
        if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
            a.error = rc == EAI_SYSTEM ? "system error" : ::gai_strerror(rc);
            return a;
        }
        for (auto* r = res; r; r = r->ai_next) {
            char text[64] = {};
            if (::getnameinfo(r->ai_addr, r->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) continue;
            std::string t(text);
            if (const auto pct = t.find('%'); pct != std::string::npos) t.resize(pct);  // a scope id
            if (const auto addr = address::parse(t);
                addr && std::find(a.addresses.begin(), a.addresses.end(), *addr) == a.addresses.end())
                a.addresses.push_back(*addr);
        }
        ::freeaddrinfo(res);
        return a;
    }
    void work() {
        std::unique_lock lock(mutex);
        for (;;) {
            while (queue.empty() && !stopping) {
                ++idle;
                cv.wait(lock);
                --idle;
            }
            if (stopping) {
                --active;
                --stats.threads;
                return;
            }
            auto j = queue.front();
            queue.pop_front();
            j->at = job::phase::running;
            lock.unlock();
            auto a = lookup_with ? lookup_with(j->host) : lookup(j->host);
            lock.lock();
            release(*j);
            if (j->at == job::phase::abandoned) {
                // Its waiter gave up and a replacement may have taken this
                // thread's place: go on only if there is room.
                --stuck;
                --stats.stuck;
                if (active >= limits.threads || stopping) {
                    --stats.threads;
                    return;
                }
                ++active;
                continue;
            }
            j->at = job::phase::done;
            j->result = std::move(a);
            if (j->wake && !stopping) j->wake();
        }
    }
};

resolver_pool::resolver_pool(resolver_limits limits, lookup_fn lookup)
    : limits_(limits), state_(std::make_shared<state>(limits, std::move(lookup))) {
    if (state_->limits.threads == 0) state_->limits.threads = 1;
}

resolver_pool::~resolver_pool() { stop(); }

const resolver_pool::counters& resolver_pool::stats() const noexcept { return state_->stats; }

void resolver_pool::stop() {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    for (const auto& j : state_->queue) {
        j->at = job::phase::abandoned;
        state_->release(*j);
    }
    state_->queue.clear();
    state_->cv.notify_all();
}

asio::awaitable<resolver_pool::answer> resolver_pool::resolve(std::string host, std::string session, std::string tenant) {
    auto& st = *state_;
    auto j = std::make_shared<job>();
    j->host = std::move(host);
    j->session = std::move(session);
    j->tenant = std::move(tenant);
    auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, st.limits.timeout);
    j->wake = [timer] { asio::post(timer->get_executor(), [timer] { timer->cancel(); }); };
    {
        std::lock_guard lock(st.mutex);
        if (st.stopping) {
            answer a;
            a.refused = true;
            a.error = "the proxy is stopping";
            co_return a;
        }
        auto& s = st.by_session[j->session];
        auto& t = st.by_tenant[j->tenant];
        if (s >= st.limits.per_session || t >= st.limits.per_tenant) {
            const bool session_full = s >= st.limits.per_session;
            if (s == 0) st.by_session.erase(j->session);
            if (t == 0) st.by_tenant.erase(j->tenant);
            ++st.stats.refused;
            answer a;
            a.refused = true;
            a.error = session_full ? "too many name lookups in flight for this session (at most " +
                                         std::to_string(st.limits.per_session) + ")"
                                   : "too many name lookups in flight for this tenant (at most " +
                                         std::to_string(st.limits.per_tenant) + ")";
            co_return a;
        }
        ++s;
        ++t;
        ++st.stats.in_flight;
        ++st.stats.lookups;
        st.queue.push_back(j);
        st.cv.notify_one();
        st.staff();
    }
    boost::system::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::lock_guard lock(st.mutex);
    if (j->at == job::phase::done) {
        if (!j->result.error.empty()) ++st.stats.failed;
        co_return std::move(j->result);
    }
    // Past the deadline: the answer, whenever it comes, is nobody's.
    if (j->at == job::phase::queued) {
        st.queue.erase(std::find(st.queue.begin(), st.queue.end(), j));
        st.release(*j);
    } else if (j->at == job::phase::running) {
        --st.active;
        ++st.stuck;
        ++st.stats.stuck;
    }
    j->at = job::phase::abandoned;
    j->wake = nullptr;
    st.staff();
    ++st.stats.timed_out;
    answer a;
    a.error = "the name lookup took longer than " + std::to_string(st.limits.timeout.count()) + " ms";
    co_return a;
}

void resolver_pool::render_metrics(std::string& out) const {
    const auto& s = state_->stats;
    out += "# HELP cellgate_egress_dns_lookups_total Egress name lookups by outcome.\n"
           "# TYPE cellgate_egress_dns_lookups_total counter\n";
    out += "cellgate_egress_dns_lookups_total{outcome=\"started\"} " + std::to_string(s.lookups.load()) + "\n";
    out += "cellgate_egress_dns_lookups_total{outcome=\"failed\"} " + std::to_string(s.failed.load()) + "\n";
    out += "cellgate_egress_dns_lookups_total{outcome=\"timed_out\"} " + std::to_string(s.timed_out.load()) + "\n";
    out += "cellgate_egress_dns_lookups_total{outcome=\"refused_busy\"} " + std::to_string(s.refused.load()) + "\n";
    out += "# HELP cellgate_egress_dns_in_flight Egress name lookups not yet returned (abandoned ones included).\n"
           "# TYPE cellgate_egress_dns_in_flight gauge\n";
    out += "cellgate_egress_dns_in_flight " + std::to_string(s.in_flight.load()) + "\n";
    out += "# HELP cellgate_egress_dns_threads Resolver threads (of which stuck: in a lookup past its deadline).\n"
           "# TYPE cellgate_egress_dns_threads gauge\n";
    out += "cellgate_egress_dns_threads{state=\"all\"} " + std::to_string(s.threads.load()) + "\n";
    out += "cellgate_egress_dns_threads{state=\"stuck\"} " + std::to_string(s.stuck.load()) + "\n";
    out += "# HELP cellgate_egress_dns_limit Bounds of egress name lookups.\n"
           "# TYPE cellgate_egress_dns_limit gauge\n";
    const auto& l = state_->limits;
    out += "cellgate_egress_dns_limit{bound=\"threads\"} " + std::to_string(l.threads) + "\n";
    out += "cellgate_egress_dns_limit{bound=\"per_session\"} " + std::to_string(l.per_session) + "\n";
    out += "cellgate_egress_dns_limit{bound=\"per_tenant\"} " + std::to_string(l.per_tenant) + "\n";
    out += "cellgate_egress_dns_limit{bound=\"timeout_ms\"} " + std::to_string(l.timeout.count()) + "\n";
}

}  // namespace cellgate::egress
