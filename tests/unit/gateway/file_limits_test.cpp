// The bounds on file-system work that a hostile kernel could otherwise make
// unbounded: listing budgets, checkpoints inside the workspace, uploads that
// replace a file only once complete, the one-shot inline-files budget, the
// JSON-escape accounting of contents models, and the file-I/O pool's
// per-tenant fairness.
#include "agent/workspace_snapshot.hpp"
#include "contents/checkpoints.hpp"
#include "contents/contents_store.hpp"
#include "util/encoding.hpp"
#include "util/file_io_pool.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <string>

namespace fs = std::filesystem;
using namespace cellgate;
using contents::contents_error;
using contents::error_kind;

namespace {

class file_limits_test : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("cellgate-limits-" + std::to_string(::getpid()) + "-" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        fs::create_directories(root_);
        store_ = std::make_unique<contents::contents_store>(root_.string(), ::geteuid(), ::getegid());
    }
    void TearDown() override {
        store_.reset();
        std::error_code ignored;
        fs::remove_all(root_, ignored);
    }
    std::string host_read(const std::string& rel) const {
        std::ifstream in(root_ / rel, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }
    fs::path root_;
    std::unique_ptr<contents::contents_store> store_;
};

}  // namespace

TEST_F(file_limits_test, list_reads_at_most_its_budget_and_says_so) {
    for (int i = 0; i < 50; ++i) store_->write("f" + std::to_string(i), "");
    const auto few = store_->list("", 10);
    EXPECT_EQ(few.entries.size(), 10u);
    EXPECT_TRUE(few.truncated);
    const auto exact = store_->list("", 50);
    EXPECT_EQ(exact.entries.size(), 50u);
    EXPECT_FALSE(exact.truncated);
    EXPECT_TRUE(store_->list("", 0).truncated);
}

TEST_F(file_limits_test, a_snapshot_keeps_within_its_entry_budget_across_directories) {
    for (int d = 0; d < 5; ++d) {
        store_->make_dir("d" + std::to_string(d));
        for (int i = 0; i < 20; ++i) store_->write("d" + std::to_string(d) + "/f" + std::to_string(i), "x");
    }
    const auto snap = agent::workspace_snapshot::take(*store_, 30);
    EXPECT_FALSE(snap.complete);
    EXPECT_LE(snap.files.size(), 30u);
    const auto all = agent::workspace_snapshot::take(*store_, 1000);
    EXPECT_TRUE(all.complete);
    EXPECT_EQ(all.files.size(), 100u);
}

TEST_F(file_limits_test, an_upload_replaces_the_old_file_only_when_renamed_into_place) {
    store_->write("data.txt", "old");
    std::string temp;
    const int fd = store_->open_temp_beside("data.txt", temp);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "new!", 4), 4);
    ::close(fd);
    EXPECT_EQ(host_read("data.txt"), "old");  // a dropped upload stops here: the old file is intact
    EXPECT_NE(temp, "data.txt");
    store_->rename(temp, "data.txt", true);
    EXPECT_EQ(host_read("data.txt"), "new!");
    EXPECT_FALSE(store_->exists(temp));
}

TEST_F(file_limits_test, replacing_never_follows_a_symlink_nor_clobbers_a_directory) {
    fs::create_symlink("/etc/passwd", root_ / "link");
    std::string temp;
    EXPECT_THROW(store_->open_temp_beside("link", temp), contents_error);
    store_->make_dir("dir");
    store_->write("src", "x");
    try {
        store_->rename("src", "dir", true);
        ADD_FAILURE() << "replaced a directory";
    } catch (const contents_error& e) {
        EXPECT_EQ(e.kind(), error_kind::conflict);
    }
    // A link swapped in after the check is replaced as a name, not followed.
    store_->rename("src", "link", true);
    EXPECT_FALSE(fs::is_symlink(root_ / "link"));
    EXPECT_EQ(host_read("link"), "x");
}

TEST_F(file_limits_test, checkpoints_live_in_the_workspace_as_jupyter_names_them) {
    EXPECT_EQ(contents::checkpoint_path("notes.txt"), ".ipynb_checkpoints/notes-checkpoint.txt");
    EXPECT_EQ(contents::checkpoint_path("a/b.tar.gz"), "a/.ipynb_checkpoints/b.tar-checkpoint.gz");
    EXPECT_EQ(contents::checkpoint_path(".bashrc"), ".ipynb_checkpoints/.bashrc-checkpoint");
    EXPECT_THROW(contents::checkpoint_path(std::string(250, 'x')), contents_error);
}

TEST_F(file_limits_test, checkpoints_create_restore_follow_a_rename_and_go) {
    store_->write("nb.ipynb", "v1");
    EXPECT_FALSE(contents::find_checkpoint(*store_, "nb.ipynb"));
    contents::create_checkpoint(*store_, "nb.ipynb");
    EXPECT_EQ(host_read(".ipynb_checkpoints/nb-checkpoint.ipynb"), "v1");
    store_->write("nb.ipynb", "v2");
    contents::create_checkpoint(*store_, "nb.ipynb");  // replaces the previous one
    EXPECT_EQ(host_read(".ipynb_checkpoints/nb-checkpoint.ipynb"), "v2");
    store_->write("nb.ipynb", "v3");
    contents::restore_checkpoint(*store_, "nb.ipynb");
    EXPECT_EQ(host_read("nb.ipynb"), "v2");
    store_->make_dir("sub");
    store_->rename("nb.ipynb", "sub/moved.ipynb");
    contents::move_checkpoint(*store_, "nb.ipynb", "sub/moved.ipynb");
    EXPECT_FALSE(contents::find_checkpoint(*store_, "nb.ipynb"));
    EXPECT_EQ(host_read("sub/.ipynb_checkpoints/moved-checkpoint.ipynb"), "v2");
    EXPECT_TRUE(contents::delete_checkpoint(*store_, "sub/moved.ipynb"));
    EXPECT_FALSE(contents::delete_checkpoint(*store_, "sub/moved.ipynb"));
    // No temporary copies are left behind.
    EXPECT_EQ(store_->list(".ipynb_checkpoints", 10).entries.size(), 0u);
    EXPECT_EQ(store_->list("", 10).entries.size(), 2u);  // .ipynb_checkpoints and sub
}

TEST_F(file_limits_test, inline_files_are_read_within_what_is_left_of_the_budget) {
    // The snapshot saw the files empty; the kernel grew them afterwards.
    std::vector<agent::file_change> changes;
    for (int i = 0; i < 10; ++i) {
        const auto name = "f" + std::to_string(i);
        store_->write(name, std::string(300, 'x'));
        changes.push_back({name, 0, "created"});
    }
    const auto got = agent::read_inline(*store_, changes, 1000);
    ASSERT_EQ(got.size(), changes.size());
    std::size_t total = 0, kept = 0;
    for (const auto& g : got)
        if (g) {
            total += g->size();
            ++kept;
        }
    EXPECT_LE(total, 1000u);
    EXPECT_EQ(kept, 3u);
}

TEST(encoding_limits, a_utf8_sequence_cut_by_a_chunk_end_waits_for_its_next_bytes) {
    EXPECT_EQ(utf8_complete_length(""), 0u);
    EXPECT_EQ(utf8_complete_length("abc"), 3u);
    EXPECT_EQ(utf8_complete_length("caf\xc3\xa9"), 5u);       // é complete
    EXPECT_EQ(utf8_complete_length("caf\xc3"), 3u);            // é's lead waits
    EXPECT_EQ(utf8_complete_length("x\xe2\x82"), 1u);         // two of €'s three bytes
    EXPECT_EQ(utf8_complete_length("x\xe2\x82\xac"), 4u);
    EXPECT_EQ(utf8_complete_length("x\xf0\x9f\x98"), 1u);     // three of an emoji's four
    EXPECT_EQ(utf8_complete_length("x\xf0\x9f\x98\x80"), 5u);
    // Bytes that can never complete are sent (and replaced) rather than held.
    EXPECT_EQ(utf8_complete_length("x\xff"), 2u);
    EXPECT_EQ(utf8_complete_length("x\x80\x80\x80\x80"), 5u);
    EXPECT_EQ(utf8_complete_length("x\xc0"), 2u);
}

TEST(encoding_limits, control_bytes_and_the_json_escaped_size) {
    EXPECT_FALSE(has_control_bytes("plain text\twith\r\nlines"));
    EXPECT_TRUE(has_control_bytes(std::string("nul\0byte", 8)));
    EXPECT_TRUE(has_control_bytes("bell\a"));
    EXPECT_EQ(json_escaped_size("abc"), 3u);
    EXPECT_EQ(json_escaped_size("a\"b\\c\n"), 9u);
    EXPECT_EQ(json_escaped_size(std::string(4, '\0')), 24u);
}

namespace {

// A gate the test opens: jobs wait on it, without sleeping.
struct gate {
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    void wait() {
        std::unique_lock lock(m);
        cv.wait(lock, [this] { return open; });
    }
    void release() {
        {
            std::lock_guard lock(m);
            open = true;
        }
        cv.notify_all();
    }
};

}  // namespace

TEST(file_io_pool_test, one_tenant_cannot_take_every_thread) {
    util::file_io_pool pool({.threads = 3, .per_tenant_running = 2, .per_tenant_queued = 8, .max_queued = 64});
    gate hold;
    std::atomic<int> a_started{0};
    std::promise<void> two_running;
    for (int i = 0; i < 4; ++i)
        ASSERT_EQ(pool.submit("a", [&] {
                      if (++a_started == 2) two_running.set_value();
                      hold.wait();
                  }),
                  util::file_io_pool::admission::accepted);
    two_running.get_future().wait();
    // Tenant a's two slots are busy and two more of its jobs wait; b still runs now.
    std::promise<void> b_ran;
    ASSERT_EQ(pool.submit("b", [&] { b_ran.set_value(); }), util::file_io_pool::admission::accepted);
    b_ran.get_future().wait();
    EXPECT_EQ(a_started.load(), 2);
    hold.release();
}

TEST(file_io_pool_test, queues_are_bounded) {
    util::file_io_pool pool({.threads = 1, .per_tenant_running = 1, .per_tenant_queued = 2, .max_queued = 3});
    gate hold;
    std::promise<void> running;
    ASSERT_EQ(pool.submit("a", [&] {
                  running.set_value();
                  hold.wait();
              }),
              util::file_io_pool::admission::accepted);
    running.get_future().wait();
    EXPECT_EQ(pool.submit("a", [] {}), util::file_io_pool::admission::accepted);
    EXPECT_EQ(pool.submit("a", [] {}), util::file_io_pool::admission::accepted);
    EXPECT_EQ(pool.submit("a", [] {}), util::file_io_pool::admission::tenant_busy);
    EXPECT_EQ(pool.submit("b", [] {}), util::file_io_pool::admission::accepted);
    EXPECT_EQ(pool.submit("c", [] {}), util::file_io_pool::admission::pool_busy);
    hold.release();
}
