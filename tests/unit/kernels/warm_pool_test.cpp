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
    p.start_ended("python3", make("python3"));
    p.start_ended("python3", make("python3"));
    const auto next = p.plan(t0, 100);
    EXPECT_EQ(next.size(), 2u);  // one more python3, and r
    p.start_ended(next[0], make(next[0]));
    p.start_ended(next[1], make(next[1]));
    EXPECT_TRUE(p.plan(t0, 100).empty());  // every target met

    warm_pool tight({{"python3", 5}}, 4);
    EXPECT_EQ(tight.plan(t0, 1).size(), 1u);  // the total limit leaves room for one
    EXPECT_TRUE(tight.plan(t0, 1).empty());
}

TEST_F(pool_test, a_failed_start_pauses_the_pool) {
    warm_pool p({{"python3", 2}}, 2);
    ASSERT_EQ(p.plan(t0, 10).size(), 2u);
    p.start_failed("python3", t0);
    p.start_ended("python3", nullptr);
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
    p.start_ended("python3", dead);
    p.start_ended("python3", good);
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
    p.start_ended("python3", a);
    p.start_ended("python3", b);
    EXPECT_TRUE(p.remove(a));
    EXPECT_FALSE(p.remove(a));
    const auto left = p.drain();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0], b);
    EXPECT_FALSE(p.holds(b));
}
