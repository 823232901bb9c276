#include "http/connection_limiter.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using cellgate::http::connection_limiter;

TEST(connection_limiter, caps_each_address_and_the_total) {
    connection_limiter l(5, 3);
    std::vector<connection_limiter::slot> a;
    for (int i = 0; i < 3; ++i) a.push_back(l.acquire("10.0.0.1"));
    for (const auto& s : a) EXPECT_TRUE(s);
    EXPECT_FALSE(l.acquire("10.0.0.1"));  // per address
    auto b1 = l.acquire("10.0.0.2"), b2 = l.acquire("10.0.0.2");
    EXPECT_TRUE(b1 && b2);
    EXPECT_FALSE(l.acquire("10.0.0.3"));  // total
    EXPECT_EQ(l.open(), 5u);
    a.pop_back();
    EXPECT_EQ(l.open_from("10.0.0.1"), 2u);
    EXPECT_TRUE(l.acquire("10.0.0.3"));  // released as soon as the last copy goes
}

TEST(connection_limiter, a_slot_outliving_its_limiter_is_harmless) {
    connection_limiter::slot s;
    {
        connection_limiter l(1, 1);
        s = l.acquire("a");
        ASSERT_TRUE(s);
    }
    s.reset();  // the counters live as long as the slot
    SUCCEED();
}

}  // namespace
