// The state store's pause rows: a paused kernel is written with what its
// pause kept and read back so by a restarted gateway (main.cpp takes it back
// paused); a resume or a removal clears the row.
#include "kernels/state_store.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

using namespace cellgate::kernels;
namespace fs = std::filesystem;

namespace {

struct temp_db {
    fs::path dir = fs::temp_directory_path() / ("cellgate-store-test-" + std::to_string(::getpid()));
    temp_db() { fs::create_directories(dir); }
    ~temp_db() { fs::remove_all(dir); }
    fs::path file() const { return dir / "gateway.db"; }
};

persisted_kernel row(const std::string& id) {
    persisted_kernel k;
    k.id = id;
    k.tenant = "alpha";
    k.spec_name = "python3";
    k.policy.pause_on_idle = true;
    k.policy.auto_resume = false;
    k.policy.pause_at_end = true;
    k.created = k.last_activity = std::chrono::system_clock::now();
    return k;
}

const persisted_kernel* find(const std::vector<persisted_kernel>& rows, const std::string& id) {
    for (const auto& r : rows)
        if (r.id == id) return &r;
    return nullptr;
}

}  // namespace

TEST(state_store, a_pause_survives_a_reopen_and_a_resume_clears_it) {
    temp_db db;
    const auto since = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'796'400'000'000));
    {
        state_store s(db.file());
        s.put_kernel(row("k-paused"));
        s.put_kernel(row("k-running"));
        s.set_paused("k-paused", "memory", since, 25u << 20);
    }
    state_store s(db.file());  // as a restarted gateway opens it
    auto rows = s.kernels();
    ASSERT_EQ(rows.size(), 2u);
    const auto* p = find(rows, "k-paused");
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->paused, "memory");
    EXPECT_EQ(p->paused_since, since);
    EXPECT_EQ(p->paused_image_bytes, 25u << 20);
    EXPECT_TRUE(p->policy.pause_on_idle);
    EXPECT_FALSE(p->policy.auto_resume);
    EXPECT_TRUE(p->policy.pause_at_end);
    const auto* r = find(rows, "k-running");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->paused, "") << "a kernel never paused has no pause row";

    s.set_paused("k-paused", "", {}, 0);  // resumed
    EXPECT_EQ(find(s.kernels(), "k-paused")->paused, "");
    s.set_paused("k-paused", "files", since, 0);
    s.remove_kernel("k-paused");  // deleted while paused: the pause row goes too
    s.put_kernel(row("k-paused"));
    EXPECT_EQ(find(s.kernels(), "k-paused")->paused, "") << "a new kernel of the same id starts unpaused";
}
