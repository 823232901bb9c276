#include "kernels/launch_gate.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

using cellgate::kernels::launch_gate;

namespace {

// A pool that runs nothing until told: posted jobs wait here, like launches
// that hang, so the test sees exactly what reached the threads.
struct manual_pool {
    std::deque<launch_gate::job> posted;
    void run_one() {
        auto j = std::move(posted.front());
        posted.pop_front();
        j();
    }
};

}  // namespace

TEST(launch_gate, one_tenant_cannot_take_every_launch_slot) {
    manual_pool pool;
    std::vector<std::string> ran;
    launch_gate gate(2, [&](launch_gate::job j) { pool.posted.push_back(std::move(j)); });
    for (int i = 0; i < 5; ++i) gate.submit("hog", [&ran, i] { ran.push_back("hog" + std::to_string(i)); });
    gate.submit("other", [&] { ran.push_back("other"); });
    // Two of the hog's starts are on the pool, the other three wait in its own
    // queue; the other tenant's start is on the pool at once, not behind them.
    ASSERT_EQ(pool.posted.size(), 3u);
    EXPECT_EQ(gate.in_flight("hog"), 2u);
    EXPECT_EQ(gate.waiting("hog"), 3u);
    EXPECT_EQ(gate.in_flight("other"), 1u);
    EXPECT_EQ(gate.waiting_total(), 3u);

    pool.run_one();  // hog0 ends: hog2 takes its slot, in order
    pool.run_one();  // hog1
    pool.run_one();  // other
    EXPECT_EQ(gate.in_flight("other"), 0u);
    ASSERT_EQ(pool.posted.size(), 2u);
    while (!pool.posted.empty()) pool.run_one();
    EXPECT_EQ(ran, (std::vector<std::string>{"hog0", "hog1", "other", "hog2", "hog3", "hog4"}));
    EXPECT_EQ(gate.in_flight("hog"), 0u);
    EXPECT_EQ(gate.waiting_total(), 0u);
}

TEST(launch_gate, a_job_that_throws_still_frees_its_slot) {
    manual_pool pool;
    int done = 0;
    launch_gate gate(1, [&](launch_gate::job j) { pool.posted.push_back(std::move(j)); });
    gate.submit("t", [] { throw std::runtime_error("boom"); });
    gate.submit("t", [&] { ++done; });
    ASSERT_EQ(pool.posted.size(), 1u);
    pool.run_one();
    ASSERT_EQ(pool.posted.size(), 1u);
    pool.run_one();
    EXPECT_EQ(done, 1);
    EXPECT_EQ(gate.in_flight("t"), 0u);
}
