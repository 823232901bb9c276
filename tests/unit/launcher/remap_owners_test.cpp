// remap_owners (kernel-launcher/src/workspace.hpp): a seeded workspace's or a
// volume's files move to their new slot's ids, and a symlink planted inside
// never carries a change outside (security review turn 3, L5).
#include "workspace.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace cellgate::launcher;

namespace {

struct stat_of {
    explicit stat_of(const fs::path& p) { ::lstat(p.c_str(), &st); }
    struct stat st {};
};

TEST(remap_owners, moves_every_owner_in_the_range_and_follows_no_link) {
    if (::geteuid() != 0) GTEST_SKIP() << "changing owners needs root";
    const auto base = fs::temp_directory_path() / ("cellgate-remap-" + std::to_string(::getpid()));
    fs::remove_all(base);
    fs::create_directories(base / "tree" / "a" / "b");
    fs::create_directories(base / "outside");
    std::ofstream(base / "tree" / "a" / "b" / "f") << "x";
    std::ofstream(base / "outside" / "victim") << "not yours";
    fs::create_symlink(base / "outside", base / "tree" / "a" / "link");
    const std::uint32_t from = 300000000, to = 310000000;
    for (const auto& p : {base / "tree", base / "tree" / "a", base / "tree" / "a" / "b", base / "tree" / "a" / "b" / "f",
                          base / "outside", base / "outside" / "victim"})
        ASSERT_EQ(::lchown(p.c_str(), from + 1000, from + 1000), 0) << p;
    ASSERT_EQ(::lchown((base / "tree" / "a" / "link").c_str(), from + 7, from + 7), 0);
    std::ofstream(base / "tree" / "keep") << "k";
    ASSERT_EQ(::lchown((base / "tree" / "keep").c_str(), 4242, 4242), 0);  // outside the range: unchanged

    remap_owners(base / "tree", from, to);

    for (const auto& p : {base / "tree", base / "tree" / "a", base / "tree" / "a" / "b", base / "tree" / "a" / "b" / "f"})
        EXPECT_EQ(stat_of(p).st.st_uid, to + 1000) << p;
    EXPECT_EQ(stat_of(base / "tree" / "a" / "link").st.st_uid, to + 7) << "the link itself";
    EXPECT_EQ(stat_of(base / "outside" / "victim").st.st_uid, from + 1000) << "nothing through the link";
    EXPECT_EQ(stat_of(base / "outside").st.st_uid, from + 1000);
    EXPECT_EQ(stat_of(base / "tree" / "keep").st.st_uid, 4242u);
    // The root itself a symlink: refused, nothing changed through it.
    fs::create_symlink(base / "outside", base / "root-link");
    EXPECT_ANY_THROW(remap_owners(base / "root-link", from, to));
    EXPECT_EQ(stat_of(base / "outside" / "victim").st.st_uid, from + 1000);
    fs::remove_all(base);
}

}  // namespace
