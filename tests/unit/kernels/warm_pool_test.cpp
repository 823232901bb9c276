#include "kernels/warm_pool.hpp"

#include <gtest/gtest.h>

using namespace cellgate;
using kernels::warm_pool;

namespace {

struct pool_test : ::testing::Test {
    wire::zmq_reactor reactor;
    metrics::registry metrics;
    kernels::kernel_settings settings;
    const warm_pool::clock::time_point t0 = warm_pool::clock::now();

    kernels::kernel_ptr make(const std::string& spec) {
        static int n = 0;
        return std::make_shared<kernels::kernel>("warm-" + std::to_string(++n), spec, "", reactor, settings, metrics);
    }
    static bool always(const kernels::kernel&) { return true; }
};

}  // namespace

TEST_F(pool_test, plans_starts_up_to_the_target_the_concurrency_and_the_room) {
    warm_pool p({{"python3", 3}, {"r", 1}}, 2);
    EXPECT_EQ(p.plan(t0, 100).size(), 2u);  // concurrency
    EXPECT_TRUE(p.plan(t0, 100).empty());   // both still starting
    p.start_ended("python3", false, make("python3"));
    p.start_ended("python3", false, make("python3"));
    const auto next = p.plan(t0, 100);
    EXPECT_EQ(next.size(), 2u);  // one more python3, and r
    p.start_ended(next[0].spec, false, make(next[0].spec));
    p.start_ended(next[1].spec, false, make(next[1].spec));
    EXPECT_TRUE(p.plan(t0, 100).empty());  // every target met

    warm_pool tight({{"python3", 5}}, 4);
    EXPECT_EQ(tight.plan(t0, 1).size(), 1u);  // the total limit leaves room for one
    EXPECT_TRUE(tight.plan(t0, 1).empty());
}

TEST_F(pool_test, a_failed_start_pauses_the_pool) {
    warm_pool p({{"python3", 2}}, 2);
    ASSERT_EQ(p.plan(t0, 10).size(), 2u);
    p.start_failed("python3", t0);
    EXPECT_FALSE(p.start_ended("python3", false, nullptr));  // a pool start's failure refuses nobody
    EXPECT_TRUE(p.plan(t0 + std::chrono::seconds(1), 10).empty());
    EXPECT_EQ(p.plan(t0 + warm_pool::failure_pause, 10).size(), 2u);
    std::string out;
    p.render(out);
    EXPECT_NE(out.find("cellgate_pool_start_failures_total 1"), std::string::npos);
}

TEST_F(pool_test, a_claim_takes_a_usable_kernel_and_counts_misses) {
    warm_pool p({{"python3", 2}}, 2);
    p.plan(t0, 10);
    auto dead = make("python3");
    auto good = make("python3");
    p.start_ended("python3", false, dead);
    p.start_ended("python3", false, good);
    const auto got = p.take("python3", [&](const kernels::kernel& k) { return &k == good.get(); });
    EXPECT_EQ(got, good);
    EXPECT_FALSE(p.holds(dead));  // dropped on the way
    EXPECT_EQ(p.take("python3", always), nullptr);
    EXPECT_EQ(p.take("no-pool", always), nullptr);
    std::string out;
    p.render(out);
    EXPECT_NE(out.find("cellgate_pool_claims_total 1"), std::string::npos);
    EXPECT_NE(out.find("cellgate_pool_misses_total 1\n"), std::string::npos);  // only the spec with a pool
}

TEST_F(pool_test, remove_and_drain) {
    warm_pool p({{"python3", 2}}, 2);
    p.plan(t0, 10);
    auto a = make("python3"), b = make("python3");
    p.start_ended("python3", false, a);
    p.start_ended("python3", false, b);
    EXPECT_TRUE(p.remove(a));
    EXPECT_FALSE(p.remove(a));
    const auto left = p.drain();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0], b);
    EXPECT_FALSE(p.holds(b));
}

namespace {

struct waits {
    std::vector<std::string> log;  // "give <tenant>#<n>" / "refuse <tenant>#<n>"
    warm_pool::waiter make(const std::string& tenant, int n) {
        const auto tag = tenant + "#" + std::to_string(n);
        return {tenant, [this, tag](kernels::kernel_ptr) { log.push_back("give " + tag); },
                [this, tag](const std::string&) { log.push_back("refuse " + tag); }};
    }
};

std::size_t demand_starts(const std::vector<warm_pool::start>& plan) {
    std::size_t n = 0;
    for (const auto& s : plan) n += s.demand ? 1 : 0;
    return n;
}

}  // namespace

TEST_F(pool_test, a_claim_that_misses_gets_the_next_kernel_from_whichever_start) {
    warm_pool p({{"python3", {1, 4}}}, 2);
    ASSERT_EQ(p.plan(t0, 10).size(), 1u);  // one refill under way
    waits w;
    ASSERT_EQ(p.take("python3", always, t0), nullptr);
    p.wait("python3", w.make("a", 1));
    ASSERT_EQ(p.take("python3", always, t0), nullptr);
    p.wait("python3", w.make("a", 2));
    // Two waiters, one refill under way: one start more, made for them.
    const auto plan = p.plan(t0, 0);  // claims hold their own admission slots: no room needed
    ASSERT_EQ(plan.size(), 1u);
    EXPECT_TRUE(plan[0].demand);
    EXPECT_TRUE(p.plan(t0, 10).empty());  // covered; and no refill while anyone waits
    // The refill ends first: its kernel goes to the oldest waiter, not the pool.
    auto got = p.start_ended("python3", false, make("python3"));
    ASSERT_TRUE(got);
    got->give(nullptr);
    EXPECT_EQ(w.log, std::vector<std::string>{"give a#1"});
    got = p.start_ended("python3", true, make("python3"));
    ASSERT_TRUE(got);
    got->give(nullptr);
    EXPECT_EQ(p.waiting(), 0u);
    EXPECT_TRUE(p.drain().empty());  // both went to claims
    // Nobody waits: the pool refills (to its raised target: two misses).
    EXPECT_EQ(p.target_of("python3", t0), 3u);
    const auto refill = p.plan(t0, 10);
    EXPECT_EQ(refill.size(), 2u);
    EXPECT_EQ(demand_starts(refill), 0u);
    std::string out;
    p.render(out);
    EXPECT_NE(out.find("cellgate_pool_waited_total 2\n"), std::string::npos);
    EXPECT_NE(out.find("cellgate_pool_target{kernelspec=\"python3\"} 3\n"), std::string::npos);
}

TEST_F(pool_test, a_bursts_starts_run_at_most_concurrency_at_once) {
    warm_pool p({{"python3", 1}}, 2);
    p.plan(t0, 10);
    p.start_ended("python3", false, make("python3"));
    waits w;
    ASSERT_NE(p.take("python3", always, t0), nullptr);  // the one ready kernel
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(p.take("python3", always, t0), nullptr);
        p.wait("python3", w.make("a", i));
    }
    EXPECT_EQ(demand_starts(p.plan(t0, 10)), 2u);  // not five at once
    EXPECT_TRUE(p.plan(t0, 10).empty());
    p.start_ended("python3", true, make("python3"))->give(nullptr);
    EXPECT_EQ(demand_starts(p.plan(t0, 10)), 1u);  // the next one, as one ends
    EXPECT_EQ(w.log, std::vector<std::string>{"give a#0"});  // in order
}

TEST_F(pool_test, one_tenants_burst_does_not_queue_anothers_single_claim_behind_it) {
    warm_pool p({{"python3", 1}}, 2);
    waits w;
    for (int i = 0; i < 4; ++i) p.wait("python3", w.make("big", i));
    p.wait("python3", w.make("small", 0));
    p.plan(t0, 10);
    p.start_ended("python3", true, make("python3"))->give(nullptr);
    p.start_ended("python3", true, make("python3"))->give(nullptr);
    EXPECT_EQ(w.log, (std::vector<std::string>{"give small#0", "give big#0"}));
}

TEST_F(pool_test, a_failed_start_for_claims_refuses_one_and_a_failed_refill_none) {
    warm_pool p({{"python3", 1}}, 2);
    waits w;
    p.wait("python3", w.make("a", 0));
    p.wait("python3", w.make("a", 1));
    ASSERT_EQ(demand_starts(p.plan(t0, 10)), 2u);
    auto r = p.start_ended("python3", true, nullptr);
    ASSERT_TRUE(r);
    r->refuse("failed");
    EXPECT_EQ(w.log, std::vector<std::string>{"refuse a#0"});
    EXPECT_EQ(p.waiting(), 1u);
    // The other waiter's start is still under way; the drain at shutdown takes it.
    const auto left = p.drain_waiters();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].tenant, "a");
    EXPECT_EQ(p.waiting(), 0u);
}

TEST_F(pool_test, misses_raise_the_target_for_the_window_and_then_the_extra_is_trimmed) {
    warm_pool p({{"python3", {1, 3}}}, 4, std::chrono::seconds(60));
    for (int i = 0; i < 5; ++i) EXPECT_EQ(p.take("python3", always, t0), nullptr);
    EXPECT_EQ(p.target_of("python3", t0), 3u);  // 1 + 5 misses, capped at 3
    const auto plan = p.plan(t0, 10);
    ASSERT_EQ(plan.size(), 3u);
    for (const auto& s : plan) p.start_ended(s.spec, false, make(s.spec));
    EXPECT_TRUE(p.trim(t0 + std::chrono::seconds(30)).empty());  // still inside the window
    const auto extra = p.trim(t0 + std::chrono::seconds(61));
    EXPECT_EQ(extra.size(), 2u);  // back to the base
    EXPECT_EQ(p.target_of("python3", t0 + std::chrono::seconds(61)), 1u);
    EXPECT_EQ(p.drain().size(), 1u);
    // A fixed pool (max = base) never grows.
    warm_pool fixed({{"python3", 2}}, 2);
    fixed.take("python3", always, t0);
    EXPECT_EQ(fixed.target_of("python3", t0), 2u);
}

TEST_F(pool_test, a_templates_pool_grows_with_misses_drops_when_unused_and_comes_back_at_its_next_claim) {
    warm_pool p(std::map<std::string, std::size_t>{}, 4);
    using std::chrono::seconds;
    EXPECT_TRUE(p.reset("tpl", 2, t0, seconds(600)).empty());
    EXPECT_EQ(p.target_of("tpl", t0), 2u);
    // Misses raise it up to twice its size.
    for (int i = 0; i < 3; ++i) EXPECT_EQ(p.take("tpl", always, t0 + seconds(1)), nullptr);
    EXPECT_EQ(p.target_of("tpl", t0 + seconds(1)), 4u);
    // Unused for the idle time: nothing is kept ready, and trim hands back what was.
    p.plan(t0 + seconds(1), 10);
    p.start_ended("tpl", false, make("tpl"));
    const auto idle = t0 + seconds(1) + seconds(600);
    EXPECT_EQ(p.target_of("tpl", idle), 0u);
    EXPECT_EQ(p.trim(idle).size(), 1u);
    EXPECT_TRUE(p.plan(idle, 10).empty());
    // The next claim brings it back.
    EXPECT_EQ(p.take("tpl", always, idle), nullptr);
    EXPECT_EQ(p.target_of("tpl", idle), 2u + 1u);  // its size, and this miss
    // Size 0 ends it.
    p.reset("tpl", 0, idle);
    EXPECT_EQ(p.target_of("tpl", idle), 0u);
}
