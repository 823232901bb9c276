// The egress proxy's own resolver (egress/resolver_pool.hpp), the host's own
// addresses (egress/host_addresses.hpp) and the audit log's writer
// (core/egress_log_writer.hpp): review turn 3, M1, M2 and M5. The lookups
// here are stand-ins that wait on a gate, so a test holds them in flight as
// long as it likes; no network.
#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include "core/egress_log_writer.hpp"
#include "egress/host_addresses.hpp"
#include "egress/resolver_pool.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <set>
#include <thread>

namespace cellgate::egress {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// A lookup that waits until its name is opened (or answers at once for "fast.*").
struct gate {
    std::mutex m;
    std::condition_variable cv;
    std::set<std::string> open;
    std::size_t waiting = 0;
    resolver_pool::answer lookup(const std::string& host) {
        std::unique_lock lock(m);
        if (!host.starts_with("fast.")) {
            ++waiting;
            cv.notify_all();
            cv.wait(lock, [&] { return open.count(host) || open.count("*"); });
            --waiting;
        }
        resolver_pool::answer a;
        a.addresses.push_back(*address::parse("93.184.216.34"));
        return a;
    }
    void release(const std::string& host) {
        std::lock_guard lock(m);
        open.insert(host);
        cv.notify_all();
    }
    void wait_for_waiting(std::size_t n) {
        std::unique_lock lock(m);
        cv.wait_for(lock, 10s, [&] { return waiting >= n; });
    }
};

struct fixture {
    asio::io_context ioc;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{ioc.get_executor()};
    std::thread runner{[this] { ioc.run(); }};
    ~fixture() {
        work.reset();
        ioc.stop();
        runner.join();
    }
    std::future<resolver_pool::answer> start(resolver_pool& pool, std::string host, std::string session,
                                            std::string tenant) {
        return asio::co_spawn(asio::make_strand(ioc), pool.resolve(std::move(host), std::move(session), std::move(tenant)),
                              asio::use_future);
    }
};

TEST(EgressResolver, M1LookupsPastASessionsOrTenantsBoundAreRefusedAtOnce) {
    gate g;
    resolver_limits l;
    l.threads = 8;
    l.per_session = 2;
    l.per_tenant = 3;
    l.timeout = 10s;
    resolver_pool pool(l, [&g](const std::string& h) { return g.lookup(h); });
    fixture f;
    auto a1 = f.start(pool, "slow1.example", "s1", "t1");
    auto a2 = f.start(pool, "slow2.example", "s1", "t1");
    g.wait_for_waiting(2);
    const auto third = f.start(pool, "slow3.example", "s1", "t1").get();  // the session's third
    EXPECT_TRUE(third.refused);
    EXPECT_NE(third.error.find("session"), std::string::npos) << third.error;
    auto b1 = f.start(pool, "slow4.example", "s2", "t1");  // the tenant's third, another session
    g.wait_for_waiting(3);
    const auto fourth = f.start(pool, "slow5.example", "s3", "t1").get();
    EXPECT_TRUE(fourth.refused);
    EXPECT_NE(fourth.error.find("tenant"), std::string::npos) << fourth.error;
    // Another tenant is served meanwhile.
    const auto other = f.start(pool, "fast.example", "s9", "t2").get();
    EXPECT_FALSE(other.refused);
    ASSERT_EQ(other.addresses.size(), 1u);
    EXPECT_EQ(pool.stats().refused.load(), 2u);
    g.release("*");
    EXPECT_TRUE(a1.get().error.empty());
    EXPECT_TRUE(a2.get().error.empty());
    EXPECT_TRUE(b1.get().error.empty());
    // Once they returned, the session may look up again.
    EXPECT_FALSE(f.start(pool, "fast.again", "s1", "t1").get().refused);
}

TEST(EgressResolver, M1ALookupPastItsTimeoutIsAbandonedAndItsThreadReplaced) {
    gate g;
    resolver_limits l;
    l.threads = 2;
    l.per_session = 2;
    l.per_tenant = 2;
    l.timeout = 100ms;
    resolver_pool pool(l, [&g](const std::string& h) { return g.lookup(h); });
    fixture f;
    // Session A holds both threads with names that never answer.
    auto a1 = f.start(pool, "slow1.example", "a", "ta");
    auto a2 = f.start(pool, "slow2.example", "a", "ta");
    g.wait_for_waiting(2);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r1 = a1.get();
    EXPECT_FALSE(r1.refused);
    EXPECT_NE(r1.error.find("longer than"), std::string::npos) << r1.error;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    a2.get();
    // B is served on replacement threads while A's lookups are still stuck.
    const auto b = f.start(pool, "fast.example", "b", "tb").get();
    EXPECT_TRUE(b.error.empty()) << b.error;
    EXPECT_EQ(pool.stats().stuck.load(), 2u);
    EXPECT_EQ(pool.stats().timed_out.load(), 2u);
    // A's stuck lookups still count against A until they really end.
    EXPECT_TRUE(f.start(pool, "fast.a", "a", "ta").get().refused);
    g.release("*");
    for (int i = 0; i < 200 && pool.stats().in_flight.load() > 0; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(pool.stats().in_flight.load(), 0u);
    EXPECT_EQ(pool.stats().stuck.load(), 0u);
    EXPECT_FALSE(f.start(pool, "fast.a", "a", "ta").get().refused);
}

TEST(EgressResolver, M1AnotherSessionsLookupDoesNotQueueBehindASlowOne) {
    gate g;
    resolver_limits l;
    l.threads = 2;
    l.timeout = 10s;
    resolver_pool pool(l, [&g](const std::string& h) { return g.lookup(h); });
    fixture f;
    EXPECT_TRUE(f.start(pool, "fast.first", "b", "tb").get().error.empty());  // one worker, idle now
    // Both submitted while that one worker is idle: the second must not wait for the first.
    std::future<resolver_pool::answer> slow, fast;
    std::promise<void> submitted;
    asio::post(f.ioc, [&] {
        slow = f.start(pool, "slow.example", "a", "ta");
        fast = f.start(pool, "fast.example", "b", "tb");
        submitted.set_value();
    });
    submitted.get_future().wait();
    EXPECT_EQ(fast.wait_for(3s), std::future_status::ready) << "B's lookup waited behind A's";
    g.release("*");
    EXPECT_TRUE(slow.get().error.empty());
}

TEST(EgressResolver, M1TheRealResolverAnswersFromTheHostsFile) {
    resolver_pool pool(resolver_limits{});
    fixture f;
    const auto a = f.start(pool, "localhost", "s", "t").get();
    ASSERT_TRUE(a.error.empty()) << a.error;
    ASSERT_FALSE(a.addresses.empty());
    for (const auto& addr : a.addresses) EXPECT_TRUE(is_internal(addr)) << addr.to_string();
    std::string metrics;
    pool.render_metrics(metrics);
    EXPECT_NE(metrics.find("cellgate_egress_dns_lookups_total{outcome=\"started\"} 1"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("cellgate_egress_dns_limit{bound=\"per_session\"} 4"), std::string::npos) << metrics;
}

TEST(EgressHostAddresses, M2TheHostsOwnAddressesAreCollected) {
    host_addresses own(false);
    const auto loopback = *address::parse("127.0.0.1");
    EXPECT_TRUE(own.contains(loopback));
    EXPECT_FALSE(own.contains(*address::parse("192.0.2.77")));
    // Every interface address getifaddrs reports is among them.
    const auto now = host_addresses::collect();
    EXPECT_EQ(own.list().size(), now.size());
    for (const auto& a : now) EXPECT_TRUE(own.contains(a)) << a.to_string();
    const auto before = own.refreshes();
    own.refresh();
    EXPECT_EQ(own.refreshes(), before + 1);
}

TEST(EgressHostAddresses, M2TheWatcherStartsAndStops) {
    host_addresses own(true);
    EXPECT_TRUE(own.contains(*address::parse("127.0.0.1")));
}

}  // namespace
}  // namespace cellgate::egress

namespace cellgate::core {
namespace {

namespace fs = std::filesystem;

egress::connection_record rec(std::uint64_t seq) {
    egress::connection_record r;
    r.seq = seq;
    r.host = "pypi.org";
    r.port = 443;
    r.reason = "closed";
    return r;
}

TEST(EgressLogWriter, M5RecordsAreWrittenInBatchesAndReadBackByKernel) {
    const auto dir = fs::temp_directory_path() / ("cellgate-egress-log-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    {
        kernels::state_store store(dir / "gateway.db");
        store.put_record({"egress", "other/1", "other", {{"seq", 1}}});
        egress_log_writer writer(store, 3);
        for (std::uint64_t i = 1; i <= 5; ++i) EXPECT_TRUE(writer.add("k1", rec(i)));
        writer.flush();
        EXPECT_EQ(writer.written(), 5u);
        EXPECT_GE(writer.batches(), 1u);
        // The last 3 are kept; another kernel's are not read.
        const auto mine = store.records_of("egress", "k1");
        ASSERT_EQ(mine.size(), 3u);
        std::set<std::uint64_t> seqs;
        for (const auto& r : mine) seqs.insert(r.body["seq"].get<std::uint64_t>());
        EXPECT_EQ(seqs, (std::set<std::uint64_t>{3, 4, 5}));
        EXPECT_EQ(store.records_of("egress", "other").size(), 1u);
        EXPECT_EQ(store.record("egress", egress_log_record_id("k1", 5))->kernel_id, "k1");
        EXPECT_FALSE(store.record("egress", egress_log_record_id("k1", 1)));
        writer.stop();
        // After stop nothing is queued: it is counted.
        EXPECT_FALSE(writer.add("k1", rec(6)));
        EXPECT_EQ(writer.dropped(), 1u);
        std::string metrics;
        writer.render_metrics(metrics);
        EXPECT_NE(metrics.find("cellgate_egress_log_records_total{outcome=\"dropped\"} 1"), std::string::npos);
    }
    fs::remove_all(dir);
}

TEST(EgressLogWriter, M5PastItsQueueARecordIsDroppedAndCounted) {
    const auto dir = fs::temp_directory_path() / ("cellgate-egress-queue-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    {
        kernels::state_store store(dir / "gateway.db");
        egress_log_writer writer(store, 1000, 4);
        std::size_t accepted = 0;
        for (std::uint64_t i = 1; i <= 2000; ++i) accepted += writer.add("k", rec(i)) ? 1 : 0;
        writer.flush();
        EXPECT_EQ(writer.written(), accepted);
        EXPECT_EQ(writer.dropped(), 2000 - accepted);
        EXPECT_GT(writer.dropped(), 0u) << "2000 records at once through a queue of 4";
    }
    fs::remove_all(dir);
}

}  // namespace
}  // namespace cellgate::core
