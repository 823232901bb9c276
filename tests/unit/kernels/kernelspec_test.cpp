#include "kernels/kernelspecs.hpp"

#include <gtest/gtest.h>

using namespace cellgate;

TEST(kernelspec, becomes_the_sandbox_that_runs_it) {
    auto k = kernels::default_python_kernelspec();
    k.runtime = "runsc";
    k.limits.memory_bytes = 123u << 20;
    k.preload = {"numpy"};
    const auto s = k.to_sandbox_spec("kernel-1", {{"KERNEL_LANG", "en"}});
    EXPECT_EQ(s.id, "kernel-1");
    EXPECT_EQ(s.image, "python");
    EXPECT_EQ(s.runtime, "runsc");
    EXPECT_EQ(s.limits.memory_bytes, 123u << 20);
    EXPECT_EQ(s.preload, std::vector<std::string>{"numpy"});
    EXPECT_EQ(s.env.at("KERNEL_LANG"), "en");
}

TEST(kernelspec, a_language_is_normalized_as_e2bs_server_reads_it) {
    using cellgate::kernels::normalize_language;
    EXPECT_EQ(normalize_language("JS"), "javascript");
    EXPECT_EQ(normalize_language(" ts "), "typescript");
    EXPECT_EQ(normalize_language("Python3"), "python");
    EXPECT_EQ(normalize_language(""), "python");
    EXPECT_EQ(normalize_language("R"), "r");
    EXPECT_EQ(normalize_language("cobol"), "cobol");
}
