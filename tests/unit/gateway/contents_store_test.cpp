#include "contents/contents_store.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>

using cellgate::contents::contents_error;
using cellgate::contents::contents_store;
using cellgate::contents::entry_info;
using cellgate::contents::entry_type;
using cellgate::contents::error_kind;
using cellgate::contents::mime_type_for;
namespace fs = std::filesystem;

namespace {

// Short names keep each expectation on one line.
constexpr error_kind bad_path = error_kind::bad_path;
constexpr error_kind not_found = error_kind::not_found;
constexpr error_kind conflict = error_kind::conflict;
constexpr error_kind too_large = error_kind::too_large;
constexpr error_kind forbidden = error_kind::forbidden;

std::string kind_name(error_kind kind) {
    switch (kind) {
    case error_kind::bad_path: return "bad_path";
    case error_kind::not_found: return "not_found";
    case error_kind::conflict: return "conflict";
    case error_kind::too_large: return "too_large";
    case error_kind::no_space: return "no_space";
    case error_kind::forbidden: return "forbidden";
    case error_kind::io: return "io";
    }
    return "unknown";
}

// A workspace root plus an "outside" sibling standing in for the host: the
// escape tests plant links from the workspace to it and check it is untouched.
class contents_store_test : public ::testing::Test {
protected:
    void SetUp() override {
        base_ = fs::temp_directory_path() /
                ("cellgate-contents-" + std::to_string(::getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(base_);
        root_ = base_ / "workspace";
        outside_ = base_ / "outside";
        fs::create_directories(root_);
        fs::create_directories(outside_);
        secret_ = outside_ / "secret.txt";
        put_host(secret_, secret_text);
        store_ = std::make_unique<contents_store>(root_.string(), ::geteuid(), ::getegid());
    }
    void TearDown() override {
        store_.reset();
        std::error_code ignored;
        fs::remove_all(base_, ignored);
    }

    static void put_host(const fs::path& path, const std::string& content) {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << content;
    }
    static std::string slurp_host(const fs::path& path) {
        std::ifstream in(path, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }

    // Runs `op`, which must fail with `kind`, and checks the message does not
    // reveal where the workspace lives on the host.
    void expect_error(error_kind kind, const std::function<void()>& op, const std::string& what) {
        SCOPED_TRACE(what);
        try {
            op();
            ADD_FAILURE() << what << " succeeded, expected " << kind_name(kind);
        } catch (const contents_error& e) {
            EXPECT_EQ(kind_name(e.kind()), kind_name(kind)) << e.what();
            EXPECT_EQ(std::string(e.what()).find(base_.string()), std::string::npos) << e.what();
        }
    }

    void expect_secret_untouched() {
        EXPECT_EQ(slurp_host(secret_), secret_text);
        EXPECT_EQ(std::distance(fs::directory_iterator(outside_), fs::directory_iterator()), 1)
            << "something was created outside the workspace";
    }

    static constexpr const char* secret_text = "host secret\n";
    fs::path base_, root_, outside_, secret_;
    std::unique_ptr<contents_store> store_;
};

}  // namespace

// ---- ordinary use ----------------------------------------------------------

TEST_F(contents_store_test, write_then_read_round_trips_binary_data) {
    const std::string data("a\0b\xff\n", 5);
    store_->write("data.bin", data);
    EXPECT_EQ(store_->read("data.bin", 1024), data);
    EXPECT_EQ(slurp_host(root_ / "data.bin"), data);

    store_->write("data.bin", "xy");  // shorter: the old tail must go
    EXPECT_EQ(store_->read("data.bin", 1024), "xy");
    store_->write("data.bin", "");
    EXPECT_EQ(store_->read("data.bin", 1024), "");
}

TEST_F(contents_store_test, write_reports_the_new_entry) {
    fs::create_directory(root_ / "dir");
    const entry_info info = store_->write("dir/notes.txt", "hello");
    EXPECT_EQ(info.name, "notes.txt");
    EXPECT_EQ(info.path, "dir/notes.txt");
    EXPECT_EQ(info.type, entry_type::file);
    EXPECT_EQ(info.size, 5u);
    EXPECT_TRUE(info.writable);
    EXPECT_GT(info.mtime_ns, 0);
    EXPECT_GT(info.ctime_ns, 0);
}

TEST_F(contents_store_test, write_needs_an_existing_parent) {
    expect_error(not_found, [&] { store_->write("nope/a.txt", "x"); }, "missing parent");
    put_host(root_ / "file", "x");
    expect_error(not_found, [&] { store_->write("file/a.txt", "x"); }, "file as parent");
}

TEST_F(contents_store_test, append_creates_then_extends) {
    store_->append("upload.bin", "chunk1-");
    const entry_info info = store_->append("upload.bin", "chunk2");
    EXPECT_EQ(info.size, 13u);
    EXPECT_EQ(store_->read("upload.bin", 100), "chunk1-chunk2");
}

TEST_F(contents_store_test, read_stops_at_max_bytes) {
    store_->write("big.txt", std::string(100, 'x'));
    EXPECT_EQ(store_->read("big.txt", 100).size(), 100u);
    expect_error(too_large, [&] { store_->read("big.txt", 99); }, "over the cap");
}

TEST_F(contents_store_test, a_directory_is_not_a_file) {
    fs::create_directory(root_ / "dir");
    expect_error(conflict, [&] { store_->read("dir", 100); }, "read");
    expect_error(conflict, [&] { store_->write("dir", "x"); }, "write");
    expect_error(conflict, [&] { store_->append("dir", "x"); }, "append");
    expect_error(conflict, [&] { store_->copy("dir", "copy"); }, "copy");
    expect_error(conflict, [&] { store_->write("", "x"); }, "write the root");
    EXPECT_TRUE(fs::is_directory(root_ / "dir"));
}

TEST_F(contents_store_test, stat_reports_files_directories_and_the_root) {
    store_->write("a.txt", "abc");
    fs::create_directory(root_ / "sub");

    const auto file = store_->stat("a.txt");
    EXPECT_EQ(file.type, entry_type::file);
    EXPECT_EQ(file.size, 3u);
    const auto dir = store_->stat("sub");
    EXPECT_EQ(dir.type, entry_type::directory);
    EXPECT_EQ(dir.name, "sub");
    const auto root = store_->stat("");
    EXPECT_EQ(root.type, entry_type::directory);
    EXPECT_EQ(root.name, "");
    EXPECT_EQ(root.path, "");

    expect_error(not_found, [&] { store_->stat("missing"); }, "missing");
    expect_error(not_found, [&] { store_->stat("a.txt/x"); }, "below a file");
}

TEST_F(contents_store_test, exists_sees_anything_at_the_name) {
    store_->write("a.txt", "abc");
    fs::create_symlink("nowhere", root_ / "dangling");
    EXPECT_TRUE(store_->exists(""));
    EXPECT_TRUE(store_->exists("a.txt"));
    EXPECT_TRUE(store_->exists("dangling"));
    EXPECT_FALSE(store_->exists("b.txt"));
    EXPECT_FALSE(store_->exists("no/such/dir"));
    EXPECT_FALSE(store_->exists("a.txt/x"));
}

TEST_F(contents_store_test, list_is_sorted_and_typed) {
    store_->write("b.txt", "12");
    store_->write("a.txt", "1");
    fs::create_directory(root_ / "c");
    store_->write("c/inner.txt", "inner");

    const auto entries = store_->list("", 100000).entries;
    ASSERT_EQ(entries.size(), 3u);
    EXPECT_EQ(entries[0].name, "a.txt");
    EXPECT_EQ(entries[0].size, 1u);
    EXPECT_EQ(entries[1].name, "b.txt");
    EXPECT_EQ(entries[2].name, "c");
    EXPECT_EQ(entries[2].path, "c");
    EXPECT_EQ(entries[2].type, entry_type::directory);

    const auto inner = store_->list("c", 100000).entries;
    ASSERT_EQ(inner.size(), 1u);
    EXPECT_EQ(inner[0].path, "c/inner.txt");

    expect_error(not_found, [&] { store_->list("missing", 100000); }, "missing dir");
    expect_error(not_found, [&] { store_->list("b.txt", 100000); }, "a file");
}

TEST_F(contents_store_test, list_skips_non_utf8_names_but_keeps_odd_valid_ones) {
    put_host(root_ / "bad\xff name", "x");
    put_host(root_ / "line\nbreak", "x");
    put_host(root_ / "caf\xc3\xa9", "x");
    const auto entries = store_->list("", 100000).entries;
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].name, "caf\xc3\xa9");
    EXPECT_EQ(entries[1].name, "line\nbreak");
}

// Security review turn 3, L1: hidden names count against the budget, so a
// directory of millions of them is never read past it.
TEST_F(contents_store_test, hidden_names_count_against_the_listing_budget) {
    for (int i = 0; i < 50; ++i) put_host(root_ / ("\xff" + std::to_string(i)), "x");
    put_host(root_ / "visible", "x");
    const auto small = store_->list("", 10);
    EXPECT_TRUE(small.truncated) << "50 hidden names are more than a budget of 10";
    EXPECT_LE(small.entries.size() + small.hidden, 10u);
    const auto all = store_->list("", 1000);
    EXPECT_FALSE(all.truncated);
    EXPECT_EQ(all.hidden, 50u);
    ASSERT_EQ(all.entries.size(), 1u);
    EXPECT_EQ(all.entries[0].name, "visible");
}

TEST_F(contents_store_test, make_dir_creates_and_conflicts) {
    const auto info = store_->make_dir("new");
    EXPECT_EQ(info.type, entry_type::directory);
    EXPECT_EQ(info.path, "new");
    EXPECT_TRUE(fs::is_directory(root_ / "new"));
    expect_error(conflict, [&] { store_->make_dir("new"); }, "again");
    store_->write("f", "x");
    expect_error(conflict, [&] { store_->make_dir("f"); }, "over a file");
    expect_error(conflict, [&] { store_->make_dir(""); }, "the root");
    expect_error(not_found, [&] { store_->make_dir("a/b"); }, "missing parent");
}

TEST_F(contents_store_test, make_parents_creates_only_the_missing_directories) {
    store_->make_parents("a/b/c/file.txt");
    EXPECT_TRUE(fs::is_directory(root_ / "a/b/c"));
    EXPECT_FALSE(fs::exists(root_ / "a/b/c/file.txt"));
    store_->write("a/b/c/file.txt", "x");
    store_->make_parents("a/b/c/file.txt");  // all there already
    store_->make_parents("top.txt");         // the root is its parent
    EXPECT_EQ(store_->read("a/b/c/file.txt", 10), "x");

    put_host(root_ / "plain", "x");
    expect_error(conflict, [&] { store_->make_parents("plain/sub/f.txt"); },
                 "a file in the way");
}

TEST_F(contents_store_test, remove_files_and_directories) {
    store_->write("f.txt", "x");
    store_->remove("f.txt");
    EXPECT_FALSE(fs::exists(root_ / "f.txt"));

    fs::create_directory(root_ / "empty");
    store_->remove("empty");
    EXPECT_FALSE(fs::exists(root_ / "empty"));

    fs::create_directories(root_ / "full/deeper/deepest");
    put_host(root_ / "full/a.txt", "a");
    put_host(root_ / "full/deeper/deepest/b.txt", "b");
    expect_error(conflict, [&] { store_->remove("full"); }, "not empty");
    EXPECT_TRUE(fs::exists(root_ / "full/a.txt"));
    store_->remove("full", true);
    EXPECT_FALSE(fs::exists(root_ / "full"));

    expect_error(not_found, [&] { store_->remove("gone"); }, "missing");
    expect_error(forbidden, [&] { store_->remove("", true); }, "the root");
    EXPECT_TRUE(fs::is_directory(root_));
}

TEST_F(contents_store_test, rename_moves_and_never_replaces) {
    store_->write("a.txt", "A");
    fs::create_directory(root_ / "dir");
    const auto info = store_->rename("a.txt", "dir/b.txt");
    EXPECT_EQ(info.path, "dir/b.txt");
    EXPECT_EQ(info.size, 1u);
    EXPECT_FALSE(fs::exists(root_ / "a.txt"));
    EXPECT_EQ(store_->read("dir/b.txt", 10), "A");

    store_->write("c.txt", "C");
    expect_error(conflict, [&] { store_->rename("c.txt", "dir/b.txt"); }, "exists");
    EXPECT_EQ(store_->read("dir/b.txt", 10), "A");
    expect_error(not_found, [&] { store_->rename("missing", "x"); }, "missing source");
    expect_error(bad_path, [&] { store_->rename("dir", "dir/inside"); }, "into itself");
    expect_error(forbidden, [&] { store_->rename("", "x"); }, "the root");
}

TEST_F(contents_store_test, copy_duplicates_and_never_replaces) {
    store_->write("a.txt", "content");
    const auto info = store_->copy("a.txt", "b.txt");
    EXPECT_EQ(info.path, "b.txt");
    EXPECT_EQ(info.size, 7u);
    EXPECT_EQ(store_->read("b.txt", 100), "content");
    EXPECT_EQ(store_->read("a.txt", 100), "content");

    store_->write("c.txt", "other");
    expect_error(conflict, [&] { store_->copy("a.txt", "c.txt"); }, "exists");
    EXPECT_EQ(store_->read("c.txt", 100), "other");
    expect_error(not_found, [&] { store_->copy("missing", "d.txt"); }, "missing");
    EXPECT_FALSE(fs::exists(root_ / "d.txt"));
}

TEST_F(contents_store_test, copy_of_a_large_file_is_complete) {
    std::string data(300 * 1024 + 7, '\0');
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 % 251);
    store_->write("big.bin", data);
    store_->copy("big.bin", "big2.bin");
    EXPECT_EQ(store_->read("big2.bin", data.size()), data);
}

TEST_F(contents_store_test, open_for_read_hands_over_a_blocking_fd) {
    store_->write("a.txt", "streamed");
    std::uint64_t size = 0;
    const int fd = store_->open_for_read("a.txt", size);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(size, 8u);
    EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    char buffer[16] = {};
    EXPECT_EQ(::read(fd, buffer, sizeof buffer), 8);
    EXPECT_EQ(std::string(buffer, 8), "streamed");
    ::close(fd);
    expect_error(not_found, [&] { store_->open_for_read("missing", size); }, "missing");
}

TEST_F(contents_store_test, untitled_names_count_up_past_anything_taken) {
    EXPECT_EQ(store_->untitled_name("", "", ".txt"), "Untitled.txt");
    store_->write("Untitled.txt", "");
    EXPECT_EQ(store_->untitled_name("", "", ".txt"), "Untitled1.txt");
    fs::create_symlink("/nowhere", root_ / "Untitled1.txt");  // a link takes the name too
    fs::create_directory(root_ / "Untitled2.txt");
    EXPECT_EQ(store_->untitled_name("", "", ".txt"), "Untitled3.txt");

    fs::create_directory(root_ / "sub");
    EXPECT_EQ(store_->untitled_name("sub", "Untitled Folder", ""), "Untitled Folder");
    EXPECT_EQ(store_->untitled_name("sub", "Notebook", ".ipynb"), "Notebook.ipynb");
    expect_error(bad_path, [&] { store_->untitled_name("", "a/b", ".txt"); },
                 "slash in base");
    expect_error(not_found, [&] { store_->untitled_name("nope", "", ".txt"); },
                 "missing dir");
}

TEST_F(contents_store_test, created_entries_belong_to_the_kernel_owner) {
    if (::geteuid() != 0) GTEST_SKIP() << "changing owners needs root";
    constexpr std::uint32_t kernel_id = 54321;
    contents_store store(root_.string(), kernel_id, kernel_id);
    store.write("w.txt", "x");
    store.append("a.txt", "x");
    store.make_dir("d");
    store.make_parents("p/q/file");
    store.copy("w.txt", "c.txt");
    for (const char* name : {"w.txt", "a.txt", "d", "p", "p/q", "c.txt"}) {
        struct stat st {};
        ASSERT_EQ(::lstat((root_ / name).c_str(), &st), 0) << name;
        EXPECT_EQ(st.st_uid, kernel_id) << name;
        EXPECT_EQ(st.st_gid, kernel_id) << name;
    }
}

TEST_F(contents_store_test, a_missing_root_is_an_io_error_without_the_host_path) {
    try {
        contents_store store((base_ / "no-such-root").string(), ::geteuid(), ::getegid());
        ADD_FAILURE() << "opened a missing root";
    } catch (const contents_error& e) {
        EXPECT_EQ(kind_name(e.kind()), "io");
        EXPECT_EQ(std::string(e.what()).find("no-such-root"), std::string::npos) << e.what();
    }
}

// ---- path checking ---------------------------------------------------------

TEST_F(contents_store_test, check_path_accepts_plain_relative_paths) {
    EXPECT_EQ(contents_store::check_path(""), "");
    EXPECT_EQ(contents_store::check_path("a"), "a");
    EXPECT_EQ(contents_store::check_path("a/b.txt"), "a/b.txt");
    EXPECT_EQ(contents_store::check_path(".hidden/..dots.../x y"), ".hidden/..dots.../x y");
    const std::string unicode = "caf\xc3\xa9/\xe6\x97\xa5.txt";
    EXPECT_EQ(contents_store::check_path(unicode), unicode);
    EXPECT_EQ(contents_store::check_path(std::string(255, 'n')), std::string(255, 'n'));
}

TEST_F(contents_store_test, check_path_refuses_anything_that_needs_normalising) {
    std::string long_path;
    while (long_path.size() <= 4096) long_path += "abcdefgh/";
    long_path += "x";
    const std::string refused[] = {
        "/etc/passwd", "/", "..", "../x", "a/..", "a/../b", ".", "./a", "a/.", "a//b", "a/",
        "//", std::string("a\0b", 3), "a\\b", "..\\x", std::string(256, 'n'),
        "ok/" + std::string(256, 'n'), long_path,
        "bad\xff", "over\xc0\xaflong", "surrogate\xed\xa0\x80",  // not UTF-8
    };
    for (const auto& path : refused) {
        try {
            contents_store::check_path(path);
            ADD_FAILURE() << "accepted '" << path << "'";
        } catch (const contents_error& e) {
            EXPECT_EQ(kind_name(e.kind()), "bad_path") << path;
        }
    }
}

TEST_F(contents_store_test, every_operation_checks_its_path_first) {
    const std::string up = "../outside/secret.txt";
    std::uint64_t size = 0;
    expect_error(bad_path, [&] { store_->read(up, 100); }, "read");
    expect_error(bad_path, [&] { store_->write(up, "pwned"); }, "write");
    expect_error(bad_path, [&] { store_->append(up, "pwned"); }, "append");
    expect_error(bad_path, [&] { store_->stat(up); }, "stat");
    expect_error(bad_path, [&] { store_->exists(up); }, "exists");
    expect_error(bad_path, [&] { store_->list("../outside", 100000); }, "list");
    expect_error(bad_path, [&] { store_->make_dir("../outside/d"); }, "make_dir");
    expect_error(bad_path, [&] { store_->make_parents("../outside/d/f"); }, "parents");
    expect_error(bad_path, [&] { store_->remove(up, true); }, "remove");
    expect_error(bad_path, [&] { store_->remove("../outside", true); }, "remove dir");
    store_->write("mine.txt", "x");
    expect_error(bad_path, [&] { store_->rename("mine.txt", "../outside/m"); }, "rename");
    expect_error(bad_path, [&] { store_->copy(up, "stolen.txt"); }, "copy from");
    expect_error(bad_path, [&] { store_->copy("mine.txt", "/tmp/x"); }, "copy to");
    expect_error(bad_path, [&] { store_->open_for_read(up, size); }, "open");
    expect_error(bad_path, [&] { store_->untitled_name("..", "", ".txt"); }, "untitled");
    expect_secret_untouched();
    EXPECT_TRUE(fs::exists(root_ / "mine.txt"));
}

TEST_F(contents_store_test, mime_types_follow_the_extension_case_insensitively) {
    EXPECT_EQ(mime_type_for("a.txt"), "text/plain");
    EXPECT_EQ(mime_type_for("dir.d/A.CSV"), "text/csv");
    EXPECT_EQ(mime_type_for("n.ipynb"), "application/x-ipynb+json");
    EXPECT_EQ(mime_type_for("x.Json"), "application/json");
    EXPECT_EQ(mime_type_for("p.JPeG"), "image/jpeg");
    EXPECT_EQ(mime_type_for("s.svg"), "image/svg+xml");
    EXPECT_EQ(mime_type_for("t.xlsx"),
              "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet");
    EXPECT_EQ(mime_type_for("d.parquet"), "application/vnd.apache.parquet");
    EXPECT_EQ(mime_type_for("c.yml"), "application/yaml");
    EXPECT_EQ(mime_type_for("archive.tar.zip"), "application/zip");
    EXPECT_EQ(mime_type_for("noext"), "application/octet-stream");
    EXPECT_EQ(mime_type_for(".txt"), "application/octet-stream");  // a dotfile, not an extension
    EXPECT_EQ(mime_type_for("txt.d/file"), "application/octet-stream");
    EXPECT_EQ(mime_type_for("trailing."), "application/octet-stream");
    EXPECT_EQ(mime_type_for("x.unknown"), "application/octet-stream");
    EXPECT_EQ(mime_type_for(""), "application/octet-stream");
}

// ---- a hostile kernel's plants ----------------------------------------------

TEST_F(contents_store_test, a_symlinked_directory_is_never_traversed) {
    fs::create_directory_symlink("/etc", root_ / "evil");
    fs::create_directory_symlink(outside_, root_ / "out");
    fs::create_directory_symlink("/", root_ / "slash");
    std::uint64_t size = 0;
    expect_error(forbidden, [&] { store_->read("evil/passwd", 1 << 20); }, "read");
    expect_error(forbidden, [&] { store_->read("slash/etc/passwd", 1 << 20); }, "via /");
    expect_error(forbidden, [&] { store_->open_for_read("evil/passwd", size); }, "open");
    expect_error(forbidden, [&] { store_->stat("evil/passwd"); }, "stat");
    expect_error(forbidden, [&] { store_->stat("evil"); }, "stat the link");
    expect_error(forbidden, [&] { store_->list("evil", 100000); }, "list");
    expect_error(forbidden, [&] { store_->exists("evil/passwd"); }, "exists");
    expect_error(forbidden, [&] { store_->write("out/new.txt", "x"); }, "write");
    expect_error(forbidden, [&] { store_->append("out/secret.txt", "x"); }, "append");
    expect_error(forbidden, [&] { store_->make_dir("out/d"); }, "make_dir");
    expect_error(forbidden, [&] { store_->make_parents("out/a/b/f"); }, "parents");
    expect_error(forbidden, [&] { store_->remove("out/secret.txt"); }, "remove");
    expect_error(forbidden, [&] { store_->copy("out/secret.txt", "s.txt"); }, "copy");
    expect_error(forbidden, [&] { store_->untitled_name("out", "", ".txt"); }, "untitled");
    expect_secret_untouched();
    EXPECT_FALSE(fs::exists(root_ / "s.txt"));
}

TEST_F(contents_store_test, a_symlinked_file_is_never_read_or_written) {
    fs::create_symlink(secret_, root_ / "link.txt");
    std::uint64_t size = 0;
    expect_error(forbidden, [&] { store_->read("link.txt", 1 << 20); }, "read");
    expect_error(forbidden, [&] { store_->open_for_read("link.txt", size); }, "open");
    expect_error(forbidden, [&] { store_->stat("link.txt"); }, "stat");
    expect_error(forbidden, [&] { store_->write("link.txt", "pwned"); }, "write");
    expect_error(forbidden, [&] { store_->append("link.txt", "pwned"); }, "append");
    expect_error(forbidden, [&] { store_->copy("link.txt", "copy.txt"); }, "copy from");
    store_->write("mine.txt", "pwned");
    expect_error(conflict, [&] { store_->copy("mine.txt", "link.txt"); }, "copy onto");
    expect_secret_untouched();
    EXPECT_TRUE(fs::is_symlink(root_ / "link.txt"));
    EXPECT_FALSE(fs::exists(root_ / "copy.txt"));
}

TEST_F(contents_store_test, a_dangling_symlink_is_not_created_through) {
    fs::create_symlink(outside_ / "planted.txt", root_ / "trap.txt");
    expect_error(forbidden, [&] { store_->write("trap.txt", "x"); }, "write");
    expect_error(forbidden, [&] { store_->append("trap.txt", "x"); }, "append");
    store_->write("mine.txt", "x");
    expect_error(conflict, [&] { store_->copy("mine.txt", "trap.txt"); }, "copy");
    expect_error(conflict, [&] { store_->make_dir("trap.txt"); }, "make_dir");
    expect_secret_untouched();
}

TEST_F(contents_store_test, a_symlink_as_an_intermediate_directory_is_refused) {
    fs::create_directory_symlink("../outside", root_ / "d");
    fs::create_directory(root_ / "real");
    fs::create_directory_symlink("../../outside", root_ / "real/deeper");
    expect_error(forbidden, [&] { store_->write("d/x.txt", "x"); }, "write");
    expect_error(forbidden, [&] { store_->append("d/x.txt", "x"); }, "append");
    expect_error(forbidden, [&] { store_->write("real/deeper/x.txt", "x"); }, "nested");
    expect_error(forbidden, [&] { store_->read("real/deeper/secret.txt", 100); }, "read");
    expect_secret_untouched();
}

TEST_F(contents_store_test, rename_onto_a_symlink_is_refused) {
    fs::create_symlink(secret_, root_ / "link.txt");
    store_->write("a.txt", "pwned");
    expect_error(conflict, [&] { store_->rename("a.txt", "link.txt"); }, "rename");
    EXPECT_TRUE(fs::is_symlink(root_ / "link.txt"));
    EXPECT_EQ(store_->read("a.txt", 100), "pwned");
    expect_secret_untouched();
}

TEST_F(contents_store_test, rename_into_a_symlinked_directory_is_refused) {
    fs::create_directory_symlink(outside_, root_ / "out");
    store_->write("a.txt", "mine");
    expect_error(forbidden, [&] { store_->rename("a.txt", "out/a.txt"); }, "into");
    expect_error(forbidden, [&] { store_->rename("out/secret.txt", "s.txt"); }, "out of");
    EXPECT_EQ(store_->read("a.txt", 100), "mine");
    EXPECT_FALSE(fs::exists(root_ / "s.txt"));
    expect_secret_untouched();
}

TEST_F(contents_store_test, a_symlink_itself_can_be_renamed_and_removed) {
    fs::create_symlink(secret_, root_ / "link.txt");
    const auto info = store_->rename("link.txt", "moved.txt");
    EXPECT_EQ(info.type, entry_type::file);
    EXPECT_FALSE(info.writable);
    EXPECT_EQ(info.size, 0u);
    EXPECT_TRUE(fs::is_symlink(root_ / "moved.txt"));
    store_->remove("moved.txt");
    EXPECT_FALSE(fs::is_symlink(root_ / "moved.txt"));
    expect_secret_untouched();
}

TEST_F(contents_store_test, a_fifo_is_refused_without_blocking) {
    ASSERT_EQ(::mkfifo((root_ / "pipe").c_str(), 0644), 0) << std::strerror(errno);
    std::uint64_t size = 0;
    expect_error(forbidden, [&] { store_->read("pipe", 100); }, "read");
    expect_error(forbidden, [&] { store_->open_for_read("pipe", size); }, "open");
    expect_error(forbidden, [&] { store_->stat("pipe"); }, "stat");
    expect_error(forbidden, [&] { store_->write("pipe", "x"); }, "write, no reader");
    expect_error(forbidden, [&] { store_->append("pipe", "x"); }, "append, no reader");
    expect_error(forbidden, [&] { store_->copy("pipe", "copy"); }, "copy");

    // With a reader present the open succeeds; fstat must still stop the write.
    const int reader = ::open((root_ / "pipe").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(reader, 0);
    expect_error(forbidden, [&] { store_->write("pipe", "x"); }, "write, reader");
    char byte = 0;
    EXPECT_LE(::read(reader, &byte, 1), 0) << "data went into the FIFO";
    ::close(reader);

    const auto entries = store_->list("", 100000).entries;
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].type, entry_type::file);
    EXPECT_FALSE(entries[0].writable);
    EXPECT_EQ(entries[0].size, 0u);
    store_->remove("pipe");
    EXPECT_FALSE(fs::exists(root_ / "pipe"));
}

TEST_F(contents_store_test, a_unix_socket_is_listed_but_never_opened) {
    const auto path = (root_ / "sock").string();
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) GTEST_SKIP() << "temp path too long for a socket";
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(sock, 0);
    ASSERT_EQ(::bind(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    ::close(sock);
    expect_error(forbidden, [&] { store_->read("sock", 100); }, "read");
    expect_error(forbidden, [&] { store_->write("sock", "x"); }, "write");
    const auto entries = store_->list("", 100000).entries;
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_FALSE(entries[0].writable);
}

TEST_F(contents_store_test, list_shows_symlinks_but_never_their_targets) {
    fs::create_directory_symlink(outside_, root_ / "dirlink");
    fs::create_symlink(secret_, root_ / "filelink");
    fs::create_symlink("/does/not/exist", root_ / "dangling");
    const auto entries = store_->list("", 100000).entries;
    ASSERT_EQ(entries.size(), 3u);
    for (const auto& e : entries) {
        EXPECT_EQ(e.type, entry_type::file) << e.name;
        EXPECT_FALSE(e.writable) << e.name;
        EXPECT_EQ(e.size, 0u) << e.name;
    }
    EXPECT_EQ(entries[0].name, "dangling");
    EXPECT_EQ(entries[1].name, "dirlink");
    EXPECT_EQ(entries[2].name, "filelink");
}

TEST_F(contents_store_test, recursive_remove_unlinks_symlinks_without_following_them) {
    fs::create_directories(outside_ / "keep/sub");
    put_host(outside_ / "keep/sub/file.txt", "keep me");
    fs::create_directories(root_ / "victim/inner");
    fs::create_directory_symlink(outside_ / "keep", root_ / "victim/to-outside");
    fs::create_directory_symlink(outside_ / "keep", root_ / "victim/inner/again");
    fs::create_symlink(secret_, root_ / "victim/secret-link");
    store_->remove("victim", true);
    EXPECT_FALSE(fs::exists(root_ / "victim"));
    EXPECT_EQ(slurp_host(outside_ / "keep/sub/file.txt"), "keep me");
    EXPECT_EQ(slurp_host(secret_), secret_text);

    // The directory itself being a symlink: only the link goes.
    fs::create_directory_symlink(outside_ / "keep", root_ / "dirlink");
    store_->remove("dirlink", true);
    EXPECT_FALSE(fs::is_symlink(root_ / "dirlink"));
    EXPECT_EQ(slurp_host(outside_ / "keep/sub/file.txt"), "keep me");
}

TEST_F(contents_store_test, recursive_remove_has_a_depth_limit) {
    fs::path deep = root_ / "shallow";
    for (int i = 0; i < 50; ++i) deep /= "d";
    fs::create_directories(deep);
    put_host(deep / "f.txt", "x");
    store_->remove("shallow", true);
    EXPECT_FALSE(fs::exists(root_ / "shallow"));

    // Built with mkdirat so the path never exceeds PATH_MAX.
    ASSERT_EQ(::mkdir((root_ / "abyss").c_str(), 0755), 0);
    int fd = ::open((root_ / "abyss").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; i < 300 && fd >= 0; ++i) {
        ASSERT_EQ(::mkdirat(fd, "d", 0755), 0);
        const int next = ::openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ::close(fd);
        fd = next;
    }
    ASSERT_GE(fd, 0);
    ::close(fd);
    expect_error(conflict, [&] { store_->remove("abyss", true); }, "too deep");
    EXPECT_TRUE(fs::exists(root_ / "abyss"));
}

TEST_F(contents_store_test, a_full_disk_is_no_space_and_leaves_no_partial_file) {
    // RLIMIT_FSIZE makes write(2) fail with EFBIG, which stands in for a full
    // workspace without needing a small mount (and root) for the test.
    struct rlimit old_limit {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_limit;
    small.rlim_cur = 4096;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    const std::string big(64 * 1024, 'x');
    bool write_failed = false;
    bool append_failed = false;
    try {
        store_->write("big.bin", big);
    } catch (const contents_error& e) {
        write_failed = e.kind() == error_kind::no_space;
    }
    store_->write("small.bin", "x");
    try {
        store_->append("small.bin", big);
    } catch (const contents_error& e) {
        append_failed = e.kind() == error_kind::no_space;
    }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);

    EXPECT_TRUE(write_failed);
    EXPECT_TRUE(append_failed);
    EXPECT_FALSE(fs::exists(root_ / "big.bin"));
    EXPECT_TRUE(fs::exists(root_ / "small.bin"));  // an existing file is not removed
}
