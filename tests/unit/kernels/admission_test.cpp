#include "kernels/admission.hpp"

#include <gtest/gtest.h>

using cellgate::kernels::admission;

TEST(admission, one_tenant_gets_its_share_and_the_total_holds) {
    admission a(5, 2);
    EXPECT_FALSE(a.admit("alice"));
    EXPECT_FALSE(a.admit("alice"));
    const auto why = a.admit("alice");
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("for this token (2)"), std::string::npos);
    EXPECT_FALSE(a.admit("bob"));
    EXPECT_FALSE(a.admit("bob"));
    EXPECT_FALSE(a.admit("carol"));
    const auto full = a.admit("dave");
    ASSERT_TRUE(full);
    EXPECT_NE(full->find("5 in total"), std::string::npos);
    EXPECT_EQ(a.admitted(), 5u);
    a.release("alice");
    EXPECT_EQ(a.admitted("alice"), 1u);
    EXPECT_FALSE(a.admit("dave"));
}

TEST(admission, a_tenants_own_quota_replaces_the_default) {
    admission a(100, 2);
    a.set_quota("big", 4);
    a.set_quota("default-again", 0);
    for (int i = 0; i < 4; ++i) EXPECT_FALSE(a.admit("big")) << i;
    EXPECT_TRUE(a.admit("big"));
    EXPECT_FALSE(a.admit("default-again"));
    EXPECT_FALSE(a.admit("default-again"));
    EXPECT_TRUE(a.admit("default-again"));
}

TEST(admission, zero_per_tenant_means_only_the_total) {
    admission a(3, 0);
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(a.admit("one"));
    EXPECT_TRUE(a.admit("one"));
}

TEST(admission, a_kernel_taken_back_is_counted_without_asking_and_releases_never_underflow) {
    admission a(1, 1);
    a.readmit("alice");
    a.readmit("alice");  // above the limits: it was already running
    EXPECT_EQ(a.admitted(), 2u);
    EXPECT_TRUE(a.admit("bob"));
    a.release("alice");
    a.release("alice");
    a.release("alice");
    EXPECT_EQ(a.admitted(), 0u);
    EXPECT_EQ(a.admitted("alice"), 0u);
    EXPECT_FALSE(a.admit("bob"));
}
