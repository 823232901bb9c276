// The workspace export's tar (contents/tar_writer.hpp, workspace_export.hpp):
// ustar headers with valid checksums, pax headers for long paths and huge
// sizes, and an export of a real directory through the contents store that
// skips what is not a regular file. Python's tarfile reads a real export in
// tests/integration/test_agent_api.py.
#include "contents/contents_store.hpp"
#include "contents/tar_reader.hpp"
#include "contents/tar_writer.hpp"
#include "contents/workspace_export.hpp"
#include "contents/workspace_import.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
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
    for (std::size_t i = 0; i < tar_block; ++i) sum += (i >= 148 && i < 156) ? 32u : static_cast<unsigned char>(h[i]);
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
    const auto r = export_tar(store, "", fd, 1000, 1 << 20);
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
    const auto sub = export_tar(store, "sub", fd2, 1000, 1 << 20);
    EXPECT_EQ(sub.entries, 2u);
    std::string part(sub.bytes, '\0');
    ASSERT_EQ(::pread(fd2, part.data(), part.size(), 0), static_cast<ssize_t>(part.size()));
    EXPECT_EQ(part.substr(0, 7), "deeper/");
    const int fd3 = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_THROW(export_tar(store, "", fd3, 2, 1 << 20), contents_error);
    EXPECT_THROW(export_tar(store, "a.txt", fd3, 10, 1 << 20), contents_error) << "not a directory";
    EXPECT_THROW(export_tar(store, "../x", fd3, 10, 1 << 20), contents_error);
    ::close(fd2);
    ::close(fd3);
    fs::remove_all(root);
}

TEST(TarReader, ReadsWhatTheWriterWrites) {
    auto h = parse_tar_header(tar_header({"dir/data.csv", false, 1234, 1700000000, 0644}));
    ASSERT_EQ(h.what, tar_header_info::status::entry);
    EXPECT_EQ(h.kind, tar_kind::file);
    EXPECT_EQ(h.path, "dir/data.csv");
    EXPECT_EQ(h.size, 1234u);
    h = parse_tar_header(tar_header({"dir", true, 0, 0, 0755}));
    EXPECT_EQ(h.kind, tar_kind::directory);
    const std::string long_path = std::string(120, 'd') + "/" + std::string(40, 'n');
    EXPECT_EQ(parse_tar_header(tar_header({long_path, false, 1, 0, 0644})).path, long_path) << "prefix + name";
    const auto pax = tar_header({"a/" + std::string(300, 'x'), false, 5, 0, 0644});
    const auto ph = parse_tar_header(pax.substr(0, tar_block));
    ASSERT_EQ(ph.kind, tar_kind::pax);
    const auto o = parse_pax(pax.substr(tar_block, ph.size));
    ASSERT_FALSE(o.malformed) << o.error;
    EXPECT_EQ(*o.path, "a/" + std::string(300, 'x'));
    EXPECT_EQ(parse_tar_header(std::string(512, '\0')).what, tar_header_info::status::end);
}

TEST(TarReader, RefusesWhatIsNotATarHeader) {
    auto good = tar_header({"f", false, 1, 0, 0644});
    auto bad = good;
    bad[0] = 'g';  // the checksum no longer matches
    EXPECT_EQ(parse_tar_header(bad).what, tar_header_info::status::malformed);
    EXPECT_EQ(parse_tar_header(std::string(512, 'a')).what, tar_header_info::status::malformed);
    EXPECT_EQ(parse_tar_header("short").what, tar_header_info::status::malformed);
    for (const char* rec : {"5 path=x\n", "99 path=x\n", "x path=y\n", "8 pathx\n", "12 size=1a\n", "0 path=\n",
                            "11 path=a\n", "11 size=4x\n"}) {
        EXPECT_TRUE(parse_pax(rec).malformed) << rec;
    }
    EXPECT_FALSE(parse_pax("12 path=abc\n11 size=42\n18 mtime=1.500000\n").malformed);
    EXPECT_EQ(*parse_pax("11 size=42\n").size, 42u);
}

// An archive in a temporary file, as the import reads it.
int archive_fd(const std::string& bytes) {
    const int fd = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    return fd;
}

std::string entry(const std::string& path, const std::string& data, char type = '0') {
    auto h = tar_header({path, type == '5', data.size(), 0, 0644});
    if (type != '0' && type != '5') {
        // Another type: patch the flag and the checksum.
        const auto at = h.size() - tar_block;
        h[at + 156] = type;
        std::memset(h.data() + at + 148, ' ', 8);
        unsigned sum = 0;
        for (std::size_t i = 0; i < tar_block; ++i) sum += static_cast<unsigned char>(h[at + i]);
        char digits[8];
        std::snprintf(digits, sizeof digits, "%06o", sum);
        std::memcpy(h.data() + at + 148, digits, 7);
    }
    return h + data + tar_padding(data.size());
}

TEST(WorkspaceImport, FilesAndDirectoriesInNothingOutsideNoLinks) {
    char tmpl[] = "/tmp/cellgate-import-test-XXXXXX";
    const fs::path root = ::mkdtemp(tmpl);
    fs::create_directories(root / "in");
    fs::create_symlink("/tmp", root / "in" / "planted");
    contents_store store(root.string(), ::getuid(), ::getgid());
    const std::string archive = entry("./proj", "", '5') + entry("./proj/a.txt", "hello") +
                                entry("proj/deep/er/b.bin", std::string(70000, 'b')) +
                                entry("../escape.txt", "no") + entry("/etc/cellgate-abs", "no") +
                                entry("proj/link", "", '2') + entry("planted/through.txt", "no") +
                                entry(std::string(130, 'p') + "/" + std::string(120, 'q'), "long") + tar_end();
    const int fd = archive_fd(archive);
    const auto r = import_tar(store, "in", fd, archive.size(), 1000);
    ::close(fd);
    EXPECT_EQ(r.files, 3u);
    EXPECT_EQ(r.directories, 1u);
    EXPECT_EQ(r.skipped_count, 4u) << "'..', absolute, a link, through a planted link";
    std::ifstream a(root / "in" / "proj" / "a.txt");
    std::string text((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "hello");
    EXPECT_EQ(fs::file_size(root / "in" / "proj" / "deep" / "er" / "b.bin"), 70000u);
    EXPECT_TRUE(fs::exists(root / "in" / std::string(130, 'p') / std::string(120, 'q')));
    EXPECT_FALSE(fs::exists(root / "escape.txt"));
    EXPECT_FALSE(fs::exists("/etc/cellgate-abs"));
    EXPECT_FALSE(fs::exists("/tmp/through.txt"));

    // Truncated, damaged, over the entry bound: a clear error.
    const int fd2 = archive_fd(entry("x.bin", std::string(3000, 'x')).substr(0, 1000));
    EXPECT_THROW(import_tar(store, "", fd2, 1000, 1000), contents_error);
    ::close(fd2);
    std::string damaged = entry("y.txt", "y");
    damaged[10] = 'Z';
    const int fd3 = archive_fd(damaged);
    EXPECT_THROW(import_tar(store, "", fd3, damaged.size(), 1000), contents_error);
    ::close(fd3);
    const int fd4 = archive_fd(archive);
    EXPECT_THROW(import_tar(store, "again", fd4, archive.size(), 2), contents_error);
    ::close(fd4);
    fs::remove_all(root);
}

TEST(WorkspaceImport, AnExportImportsBackTheSame) {
    char tmpl[] = "/tmp/cellgate-roundtrip-test-XXXXXX";
    const fs::path root = ::mkdtemp(tmpl);
    fs::create_directories(root / "src" / "a" / "b");
    std::ofstream(root / "src" / "a" / "b" / "f.txt") << "round trip";
    std::ofstream(root / "src" / (std::string(150, 'n') + ".txt")) << "long name";
    contents_store store(root.string(), ::getuid(), ::getgid());
    const int fd = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    const auto out = export_tar(store, "src", fd, 1000, 1 << 20);
    const auto in = import_tar(store, "dst", fd, out.bytes, 1000);
    ::close(fd);
    EXPECT_EQ(in.files + in.directories, out.entries);
    EXPECT_EQ(in.skipped_count, 0u);
    std::ifstream f(root / "dst" / "a" / "b" / "f.txt");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "round trip");
    EXPECT_TRUE(fs::exists(root / "dst" / (std::string(150, 'n') + ".txt")));
    fs::remove_all(root);
}

// Security review turn 3, H1: a file with many names is written once (its
// other names are link entries), the file data is bounded, a sparse file
// counts at its length and is refused past the bound before any of its
// bytes; the import turns each link into a copy of the file it names.
TEST(WorkspaceExport, HardLinksAreLinkEntriesAndSparseFilesCountAtTheirLength) {
    char tmpl[] = "/tmp/cellgate-links-test-XXXXXX";
    const fs::path root = ::mkdtemp(tmpl);
    fs::create_directories(root / "src" / "d");
    std::ofstream(root / "src" / "f.bin") << std::string(100000, 'f');
    for (int i = 0; i < 50; ++i) fs::create_hard_link(root / "src" / "f.bin", root / "src" / "d" / ("l" + std::to_string(i)));
    fs::create_hard_link(root / "src" / "f.bin", root / "src" / "d" / std::string(120, 'x'));  // a long name: pax path
    contents_store store(root.string(), ::getuid(), ::getgid());
    int fd = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    const auto out = export_tar(store, "src", fd, 1000, 200000);
    EXPECT_EQ(out.links, 51u);
    EXPECT_EQ(out.data_bytes, 100000u) << "one copy of the data";
    EXPECT_LT(out.bytes, 100000u + 60 * 3 * tar_block) << "headers only for the links";
    const auto in = import_tar(store, "dst", fd, out.bytes, 1000);
    ::close(fd);
    EXPECT_EQ(in.files, 52u);
    EXPECT_EQ(in.skipped_count, 0u);
    for (const auto& name : {std::string("l0"), std::string("l49"), std::string(120, 'x')}) {
        const auto p = root / "dst" / "d" / name;
        EXPECT_EQ(fs::file_size(p), 100000u) << name;
        EXPECT_EQ(fs::hard_link_count(p), 1u) << "a copy, never a link";
    }

    // A sparse file of 64 MiB (a few blocks on disk) against a 1 MiB bound:
    // refused, and nothing of it written.
    {
        const int sparse = ::open((root / "src" / "sparse").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        ASSERT_GE(sparse, 0);
        ASSERT_EQ(::ftruncate(sparse, 64 << 20), 0);
        ::close(sparse);
    }
    fd = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    try {
        export_tar(store, "src", fd, 1000, 1 << 20);
        ADD_FAILURE() << "a 64 MiB sparse file went into a 1 MiB archive";
    } catch (const contents_error& e) {
        EXPECT_EQ(e.kind(), error_kind::too_large);
        EXPECT_NE(std::string(e.what()).find("sparse"), std::string::npos) << e.what();
    }
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_LT(st.st_size, 1 << 20) << "the archive stopped before the sparse file's data";
    ::close(fd);

    // A link to a file the archive did not write is skipped, not made.
    std::string bad = tar_header({"evil", false, 0, 0, 0644, "../../etc/passwd"}) +
                      tar_header({"lonely", false, 0, 0, 0644, "never-written"}) + tar_end();
    fd = ::open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_EQ(::write(fd, bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
    const auto r = import_tar(store, "bad", fd, bad.size(), 1000);
    ::close(fd);
    EXPECT_EQ(r.files, 0u);
    EXPECT_EQ(r.skipped_count, 2u);
    EXPECT_FALSE(fs::exists(root / "bad" / "evil"));
    fs::remove_all(root);
}

TEST(TarReader, ReadsALinkEntryAndItsLongTarget) {
    const std::string target = "dir/" + std::string(150, 't');
    const auto headers = tar_header({"a/link", false, 0, 0, 0644, target});
    ASSERT_EQ(headers.size(), 3 * tar_block) << "a pax header with linkpath, then the ustar header";
    const auto x = parse_tar_header(std::string_view(headers).substr(0, tar_block));
    ASSERT_EQ(x.kind, tar_kind::pax);
    const auto pax = parse_pax(std::string_view(headers).substr(tar_block, x.size));
    ASSERT_FALSE(pax.malformed) << pax.error;
    EXPECT_EQ(pax.link_target.value_or(""), target);
    const auto h = parse_tar_header(std::string_view(headers).substr(2 * tar_block));
    EXPECT_EQ(h.kind, tar_kind::hard_link);
    EXPECT_EQ(h.size, 0u);
    const auto short_link = parse_tar_header(tar_header({"b", false, 0, 0, 0644, "a/file"}));
    EXPECT_EQ(short_link.kind, tar_kind::hard_link);
    EXPECT_EQ(short_link.link_target, "a/file");
}

}  // namespace
}  // namespace cellgate::contents
