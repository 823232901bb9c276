// The workspace export's tar (contents/tar_writer.hpp, workspace_export.hpp):
// ustar headers with valid checksums, pax headers for long paths and huge
// sizes, and an export of a real directory through the contents store that
// skips what is not a regular file. Python's tarfile reads a real export in
// tests/integration/test_agent_api.py.
#include "contents/contents_store.hpp"
#include "contents/tar_writer.hpp"
#include "contents/workspace_export.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace cellgate::contents {
namespace {

namespace fs = std::filesystem;

std::uint64_t field(const std::string& h, std::size_t at, std::size_t width) {
    return std::stoull(h.substr(at, width).c_str(), nullptr, 8);
}

bool checksum_ok(const std::string& h) {
    unsigned sum = 0;
    for (std::size_t i = 0; i < tar_block; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    return field(h, 148, 7) == sum;
}

TEST(TarWriter, AUstarHeaderForAShortPath) {
    const auto h = tar_header({"dir/data.csv", false, 1234, 1700000000, 0644});
    ASSERT_EQ(h.size(), tar_block);
    EXPECT_EQ(h.substr(0, 12), "dir/data.csv");
    EXPECT_EQ(h[12], '\0');
    EXPECT_EQ(field(h, 124, 11), 1234u);
    EXPECT_EQ(field(h, 136, 11), 1700000000u);
    EXPECT_EQ(h[156], '0');
    EXPECT_EQ(h.substr(257, 6), std::string("ustar\0", 6));
    EXPECT_TRUE(checksum_ok(h));
    const auto d = tar_header({"dir", true, 99, 0, 0755});
    EXPECT_EQ(d.substr(0, 4), "dir/");
    EXPECT_EQ(d[156], '5');
    EXPECT_EQ(field(d, 124, 11), 0u) << "a directory has no data";
    EXPECT_TRUE(checksum_ok(d));
}

TEST(TarWriter, LongPathsSplitIntoPrefixOrGoToAPaxHeader) {
    const std::string dir(120, 'd'), name(40, 'n');
    const auto split = tar_header({dir + "/" + name, false, 1, 0, 0644});
    ASSERT_EQ(split.size(), tar_block) << "fits ustar's prefix + name";
    EXPECT_EQ(split.substr(0, 40), name);
    EXPECT_EQ(split.substr(345, 120), dir);
    EXPECT_TRUE(checksum_ok(split));

    const std::string long_name(300, 'x');
    const auto pax = tar_header({"a/" + long_name, false, 5, 0, 0644});
    ASSERT_EQ(pax.size() % tar_block, 0u);
    ASSERT_GE(pax.size(), 3 * tar_block);
    EXPECT_EQ(pax[156], 'x');
    EXPECT_TRUE(checksum_ok(pax));
    const auto records_len = field(pax, 124, 11);
    const auto records = pax.substr(tar_block, records_len);
    const auto expected = "path=a/" + long_name + "\n";
    ASSERT_NE(records.find(expected), std::string::npos) << records;
    EXPECT_EQ(std::stoul(records), records.size()) << "a record's length counts itself";
    const auto last = pax.substr(pax.size() - tar_block);
    EXPECT_EQ(last[156], '0');
    EXPECT_TRUE(checksum_ok(last));

    const auto huge = tar_header({"big.bin", false, 10ULL << 30, 0, 0644});
    EXPECT_NE(huge.find("size=10737418240\n"), std::string::npos);
}

TEST(TarWriter, PaddingAndEnd) {
    EXPECT_EQ(tar_padding(0).size(), 0u);
    EXPECT_EQ(tar_padding(1).size(), 511u);
    EXPECT_EQ(tar_padding(512).size(), 0u);
    EXPECT_EQ(tar_end(), std::string(1024, '\0'));
}

TEST(WorkspaceExport, EveryDirectoryAndRegularFileAndNothingElse) {
    char tmpl[] = "/tmp/cellgate-export-test-XXXXXX";
    const fs::path root = ::mkdtemp(tmpl);
    fs::create_directories(root / "sub" / "deeper");
    std::ofstream(root / "a.txt") << "hello";
    std::ofstream(root / "sub" / "deeper" / "b.bin") << std::string(1000, 'b');
    fs::create_symlink("/etc/passwd", root / "link");
    ::mkfifo((root / "fifo").c_str(), 0600);
    contents_store store(root.string(), ::getuid(), ::getgid());

    const int fd = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    const auto r = export_tar(store, "", fd, 1000);
    EXPECT_EQ(r.entries, 4u) << "a.txt, sub/, sub/deeper/, sub/deeper/b.bin";
    EXPECT_EQ(r.skipped, 2u) << "the symlink and the FIFO";
    std::string archive(r.bytes, '\0');
    ASSERT_EQ(::pread(fd, archive.data(), archive.size(), 0), static_cast<ssize_t>(archive.size()));
    ::close(fd);
    EXPECT_EQ(archive.size() % tar_block, 0u);
    EXPECT_NE(archive.find("a.txt"), std::string::npos);
    EXPECT_NE(archive.find("hello"), std::string::npos);
    EXPECT_NE(archive.find("sub/deeper/b.bin"), std::string::npos);
    EXPECT_EQ(archive.find("root:"), std::string::npos) << "the symlink was not followed";

    // A directory alone, named relative to it; and the entry bound.
    const int fd2 = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    const auto sub = export_tar(store, "sub", fd2, 1000);
    EXPECT_EQ(sub.entries, 2u);
    std::string part(sub.bytes, '\0');
    ASSERT_EQ(::pread(fd2, part.data(), part.size(), 0), static_cast<ssize_t>(part.size()));
    EXPECT_EQ(part.substr(0, 7), "deeper/");
    const int fd3 = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_THROW(export_tar(store, "", fd3, 2), contents_error);
    EXPECT_THROW(export_tar(store, "a.txt", fd3, 10), contents_error) << "not a directory";
    EXPECT_THROW(export_tar(store, "../x", fd3, 10), contents_error);
    ::close(fd2);
    ::close(fd3);
    fs::remove_all(root);
}

}  // namespace
}  // namespace cellgate::contents
