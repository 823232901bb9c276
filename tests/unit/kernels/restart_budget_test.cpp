#include "kernels/restart_budget.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;
using cellgate::kernels::restart_budget;

namespace {
const auto t0 = restart_budget::clock::time_point{} + 1000s;
}

TEST(restart_budget, allows_limit_restarts_per_sliding_window) {
    restart_budget b(2, 300s);
    EXPECT_TRUE(b.take(t0));
    EXPECT_TRUE(b.take(t0 + 10s));
    EXPECT_FALSE(b.take(t0 + 20s)) << "a third inside the window";
    EXPECT_FALSE(b.take(t0 + 300s)) << "the first is exactly window old: still counted";
    EXPECT_TRUE(b.take(t0 + 301s)) << "the first has left the window";
    EXPECT_FALSE(b.take(t0 + 302s));
    EXPECT_TRUE(b.take(t0 + 311s)) << "and then the second";
}

TEST(restart_budget, a_zero_limit_allows_none) {
    restart_budget b(0, 300s);
    EXPECT_FALSE(b.take(t0));
}

TEST(restart_budget, pauses_double_after_each_failure_in_a_row_up_to_30_s) {
    restart_budget b(100, 300s);
    EXPECT_FALSE(b.paused(t0));
    std::vector<long> pauses;
    for (int i = 0; i < 7; ++i) pauses.push_back(b.failed(t0).count());
    EXPECT_EQ(pauses, (std::vector<long>{1, 2, 4, 8, 16, 30, 30}));
    EXPECT_EQ(b.failures(), 7);
    EXPECT_TRUE(b.paused(t0 + 29s));
    EXPECT_FALSE(b.paused(t0 + 30s));
    b.succeeded();
    EXPECT_EQ(b.failures(), 0);
    EXPECT_EQ(b.failed(t0 + 60s).count(), 1) << "a success starts the pauses again";
}
