#include "host_fs.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace cellgate::launcher;

namespace {

class change_owner_test : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("cellgate-host-fs-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::ofstream(dir_ / "target") << "not yours";
        ::chmod((dir_ / "target").c_str(), 0600);
    }
    void TearDown() override { fs::remove_all(dir_); }

    // A listening unix socket at `path`, as the relay makes them.
    void make_socket(const fs::path& path) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        ASSERT_GE(fd, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
        ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
        ::close(fd);
    }
    static unsigned mode_of(const fs::path& p) {
        struct stat st{};
        EXPECT_EQ(::lstat(p.c_str(), &st), 0);
        return st.st_mode & 07777;
    }

    fs::path dir_;
};

}  // namespace

TEST_F(change_owner_test, changes_a_socket_of_the_expected_type) {
    make_socket(dir_ / "shell");
    ::chmod((dir_ / "shell").c_str(), 0600);
    change_owner("test", dir_ / "shell", kNoChange, kNoChange, 0660, S_IFSOCK);
    EXPECT_EQ(mode_of(dir_ / "shell"), 0660u);
}

// Review L3: the name is swapped for a symlink to a host file between the
// relay's making it and launchd's chmod. Nothing the link points at changes.
TEST_F(change_owner_test, refuses_a_symlink_and_leaves_its_target_alone) {
    fs::create_symlink(dir_ / "target", dir_ / "shell");
    try {
        change_owner("open-to-client", dir_ / "shell", kNoChange, kNoChange, 0666, S_IFSOCK);
        FAIL() << "a symlink was followed";
    } catch (const launch_error& e) {
        EXPECT_NE(std::string(e.what()).find("symlink"), std::string::npos) << e.what();
    }
    EXPECT_EQ(mode_of(dir_ / "target"), 0600u);
    // And with no type required, still no symlink.
    EXPECT_THROW(change_owner("test", dir_ / "shell", kNoChange, kNoChange, 0666), launch_error);
    EXPECT_EQ(mode_of(dir_ / "target"), 0600u);
}

TEST_F(change_owner_test, refuses_a_file_of_the_wrong_type) {
    EXPECT_THROW(change_owner("test", dir_ / "target", kNoChange, kNoChange, 0666, S_IFSOCK), launch_error);
    EXPECT_EQ(mode_of(dir_ / "target"), 0600u);
    fs::create_directory(dir_ / "sub");
    change_owner("test", dir_ / "sub", kNoChange, kNoChange, 0750, S_IFDIR);
    EXPECT_EQ(mode_of(dir_ / "sub"), 0750u);
}
