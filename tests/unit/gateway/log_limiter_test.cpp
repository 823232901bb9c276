#include "util/log_limiter.hpp"
#include "util/log_safe.hpp"

#include <gtest/gtest.h>

using cellgate::util::log_limiter;
using namespace std::chrono_literals;

TEST(log_limiter, logs_the_first_few_then_counts_and_summarises_per_window) {
    log_limiter limiter(3, 10s);
    const log_limiter::clock::time_point t0{};
    int lines = 0;
    for (int i = 0; i < 1000; ++i) {
        const auto d = limiter.note(t0 + std::chrono::milliseconds(i));  // 1000 events in 1 s
        EXPECT_EQ(d.suppressed, 0u);
        lines += d.log ? 1 : 0;
    }
    EXPECT_EQ(lines, 3);
    // The first event of the next window reports the rest of the last one.
    auto d = limiter.note(t0 + 10s);
    EXPECT_EQ(d.suppressed, 997u);
    EXPECT_TRUE(d.log);
    // …and nothing is reported twice.
    d = limiter.note(t0 + 20s);
    EXPECT_EQ(d.suppressed, 0u);
    EXPECT_TRUE(d.log);
    EXPECT_EQ(limiter.total(), 1002u);
}

TEST(log_limiter, a_flood_costs_at_most_burst_plus_one_lines_per_window) {
    log_limiter limiter(5, 10s);
    const log_limiter::clock::time_point t0{};
    int lines = 0;
    for (int i = 0; i < 100000; ++i) {  // 100 s of 1000 events a second
        const auto d = limiter.note(t0 + std::chrono::milliseconds(i));
        lines += (d.log ? 1 : 0) + (d.suppressed > 0 ? 1 : 0);
    }
    EXPECT_LE(lines, 10 * 6);
    EXPECT_GE(lines, 10 * 5);
}

TEST(log_safe, escapes_control_bytes_and_cuts_long_text) {
    using cellgate::util::log_safe;
    EXPECT_EQ(log_safe("plain"), "plain");
    EXPECT_EQ(log_safe("a\nb\x1b[31m\\"), "a\\nb\\x1b[31m\\\\");
    EXPECT_EQ(log_safe(std::string("\0x", 2)), "\\x00x");
    EXPECT_EQ(log_safe("abcdef", 3), "abc…");
}
