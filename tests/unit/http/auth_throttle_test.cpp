// Failed authentication throttled per address (http/auth_throttle.hpp):
// security review L6, 600 wrong tokens in 0.1 s from one address.
#include "http/auth_throttle.hpp"

#include <gtest/gtest.h>

namespace cellgate::http {
namespace {

using namespace std::chrono_literals;

TEST(auth_throttle, an_address_gets_its_burst_then_one_a_second) {
    auth_throttle t({.burst = 5, .per_second = 1, .max_addresses = 100});
    const auto t0 = auth_throttle::clock::now();
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(t.refused_for("10.0.0.1", t0), 0u) << i;
        t.failed("10.0.0.1", t0);
    }
    EXPECT_EQ(t.refused_for("10.0.0.1", t0), 1u) << "the sixth waits";
    EXPECT_EQ(t.refused_for("10.0.0.2", t0), 0u) << "another address is not touched";
    EXPECT_EQ(t.refused_for("10.0.0.1", t0 + 1100ms), 0u) << "one forgiven after a second";
    t.failed("10.0.0.1", t0 + 1100ms);
    EXPECT_GT(t.refused_for("10.0.0.1", t0 + 1200ms), 0u);
    EXPECT_EQ(t.refusals(), 2u);
}

TEST(auth_throttle, memory_is_bounded_and_whole_buckets_go_first) {
    auth_throttle t({.burst = 3, .per_second = 1, .max_addresses = 10});
    const auto t0 = auth_throttle::clock::now();
    for (int i = 0; i < 3; ++i) t.failed("attacker", t0);
    for (int i = 0; i < 50; ++i) t.failed("spray-" + std::to_string(i), t0 + std::chrono::milliseconds(i));
    EXPECT_LE(t.tracked(), 10u);
    EXPECT_GT(t.refused_for("attacker", t0 + 60ms), 0u) << "the address with no credits left is still tracked";
}

}  // namespace
}  // namespace cellgate::http
