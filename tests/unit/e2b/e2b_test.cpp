// The E2B surface's pure parts: paths mapped onto the workspace, Connect
// envelopes, status ↔ Connect code, tokens, and the sandbox book's records
// surviving a restart through the state store.
#include "e2b/connect_rpc.hpp"
#include "e2b/dir_watch.hpp"
#include "e2b/sandbox_book.hpp"
#include "e2b/surface.hpp"
#include "util/api_error.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace cellgate::e2b {
namespace {

unsigned status_of_refusal(std::string_view path) {
    try {
        workspace_path(path);
    } catch (const api_exception& e) {
        return e.status();
    }
    return 0;
}

TEST(E2bPaths, HomeRelativeAndWorkspacePathsMapOntoTheWorkspace) {
    EXPECT_EQ(workspace_path("/home/user"), "");
    EXPECT_EQ(workspace_path("/home/user/"), "");
    EXPECT_EQ(workspace_path("/home/user/a.txt"), "a.txt");
    EXPECT_EQ(workspace_path("/home/user/data/raw/"), "data/raw");
    EXPECT_EQ(workspace_path("a.txt"), "a.txt");
    EXPECT_EQ(workspace_path("./a.txt"), "a.txt");
    EXPECT_EQ(workspace_path("~/a.txt"), "a.txt");
    EXPECT_EQ(workspace_path(""), "");
    EXPECT_EQ(workspace_path("/workspace/x/y"), "x/y");
    EXPECT_EQ(e2b_path(""), "/home/user");
    EXPECT_EQ(e2b_path("x/y"), "/home/user/x/y");
}

TEST(E2bPaths, AnythingElseIsRefusedBeforeTheFileSystemSeesIt) {
    EXPECT_EQ(status_of_refusal("/etc/passwd"), 404u);          // outside the sandbox's view
    EXPECT_EQ(status_of_refusal("/home/username/x"), 404u);     // a prefix is not a parent
    EXPECT_EQ(status_of_refusal("/home/user/../etc"), 400u);    // no way back up
    EXPECT_EQ(status_of_refusal("a/../../b"), 400u);
    EXPECT_EQ(status_of_refusal(std::string_view("a\0b", 3)), 400u);
    EXPECT_EQ(status_of_refusal("/home/user/a//b"), 400u);
}

TEST(E2bConnect, EnvelopesCarryABigEndianLengthAndTheEndStreamFlag) {
    const auto e = connect::envelope({{"a", 1}});
    ASSERT_EQ(e.size(), 5u + 7u);
    EXPECT_EQ(e[0], 0);
    EXPECT_EQ(e.substr(1, 4), std::string("\0\0\0\x07", 4));
    EXPECT_EQ(e.substr(5), "{\"a\":1}");
    const auto end = connect::end_stream();
    EXPECT_EQ(static_cast<unsigned char>(end[0]), connect::end_stream_flag);
    EXPECT_EQ(end.substr(5), "{}");
    const auto failed = connect::end_stream(std::pair{std::string_view("not_found"), std::string("gone")});
    EXPECT_EQ(nlohmann::json::parse(failed.substr(5))["error"]["code"], "not_found");
}

TEST(E2bConnect, ARequestIsExactlyOneUncompressedJsonEnvelope) {
    const auto good = connect::envelope({{"process", {{"cmd", "/bin/bash"}}}});
    EXPECT_EQ(connect::request_message(good)["process"]["cmd"], "/bin/bash");
    auto refused = [](std::string body) {
        try {
            connect::request_message(body);
        } catch (const api_exception& e) {
            return e.status();
        }
        return 0u;
    };
    EXPECT_EQ(refused(good + "x"), 400u);                  // trailing bytes
    EXPECT_EQ(refused(good.substr(0, good.size() - 1)), 400u);  // cut short
    auto compressed = good;
    compressed[0] = 1;
    EXPECT_EQ(refused(compressed), 400u);
    EXPECT_EQ(refused(connect::envelope(nlohmann::json::array())), 400u);  // not an object
    EXPECT_EQ(refused(std::string("\0\xff\xff\xff\xff", 5)), 400u);        // a length past the cap
}

TEST(E2bConnect, StatusesAndConnectCodesMapBothWays) {
    for (const unsigned s : {400u, 401u, 403u, 404u, 409u, 429u, 501u, 503u, 504u})
        EXPECT_EQ(status_for_connect_code(connect_code_for(s)), s) << s;
    EXPECT_EQ(connect_code_for(500), "internal");
    EXPECT_EQ(status_for_connect_code("something_new"), 500u);
}

TEST(E2bTokens, MatchOnlyTheSameNonEmptyToken) {
    const auto t = make_access_token();
    EXPECT_EQ(t.size(), 64u);
    EXPECT_NE(t, make_access_token());
    EXPECT_TRUE(token_matches(t, t));
    EXPECT_FALSE(token_matches(t.substr(1), t));
    EXPECT_FALSE(token_matches("", ""));
    EXPECT_FALSE(token_matches(t + "0", t));
}

TEST(E2bBook, RecordsAreTenantScopedAndOutliveTheGateway) {
    const auto dir = std::filesystem::temp_directory_path() / ("e2b-book-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    {
        kernels::state_store store(dir / "gateway.db");
        sandbox_book book(&store);
        sandbox_record r;
        r.id = "k-1";
        r.tenant = "alpha";
        r.template_id = "code-interpreter-v1";
        r.envd_token = "e-token";
        r.traffic_token = "t-token";
        r.metadata = {{"suite", "unit"}};
        r.env_vars = {{"A", "1"}};
        r.started = sys_clock::now();
        r.end_at = r.started + std::chrono::seconds(300);
        book.put(r);
        auto other = r;
        other.id = "k-2";
        other.tenant = "beta";
        book.put(other);
        EXPECT_TRUE(book.find("alpha", "k-1"));
        EXPECT_FALSE(book.find("beta", "k-1"));
        EXPECT_EQ(book.list("alpha").size(), 1u);
        book.forget("k-2");
        store.remove_kernel("k-3");  // another kernel's removal leaves this record
    }
    {
        kernels::state_store store(dir / "gateway.db");
        sandbox_book book(&store);
        const auto loaded = book.load();
        ASSERT_EQ(loaded.size(), 1u);
        EXPECT_EQ(loaded[0].envd_token, "e-token");
        EXPECT_EQ(loaded[0].metadata.at("suite"), "unit");
        EXPECT_EQ(loaded[0].env_vars.at("A"), "1");
        EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(loaded[0].end_at - loaded[0].started).count(), 300);
        store.remove_kernel("k-1");  // the kernel's removal takes its record
    }
    {
        kernels::state_store store(dir / "gateway.db");
        EXPECT_TRUE(sandbox_book(&store).load().empty());
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cellgate::e2b

namespace cellgate::e2b {
namespace {

// A directory watch on a real directory: events for what happens beneath
// it, relative names, a new subdirectory followed, and a symlink planted
// inside never followed out.
TEST(E2bDirWatch, ReportsChangesBeneathItAndNeverFollowsALinkOut) {
    namespace fs = std::filesystem;
    const auto base = fs::temp_directory_path() / ("cellgate-watch-" + std::to_string(::getpid()));
    fs::remove_all(base);
    fs::create_directories(base / "ws" / "watched");
    fs::create_directories(base / "outside");
    fs::create_directory_symlink(base / "outside", base / "ws" / "watched" / "link");
    auto store = std::make_shared<contents::contents_store>((base / "ws").string(), ::getuid(), ::getgid());
    boost::asio::io_context io;
    // Walks of directories made later run off the io thread, as on the file pool.
    std::vector<std::thread> walks;
    auto walk = [&walks](std::function<void()> job) {
        walks.emplace_back(std::move(job));
        return true;
    };
    auto w = std::make_shared<dir_watch>(io, store, "watched", true, watch_limits{}, walk);
    std::vector<nlohmann::json> events;
    std::string ended;
    w->start([&events](const std::vector<nlohmann::json>& got) { events.insert(events.end(), got.begin(), got.end()); },
             [&ended](const std::string& why) { ended = why; });
    auto pump = [&io] {
        io.restart();
        io.run_for(std::chrono::milliseconds(200));
    };
    pump();
    { std::ofstream(base / "outside" / "secret.txt") << "x"; }     // through the link: not watched
    { std::ofstream(base / "ws" / "watched" / "a.txt") << "one"; }
    fs::create_directory(base / "ws" / "watched" / "sub");
    pump();
    for (auto& t : walks) t.join();
    walks.clear();
    { std::ofstream(base / "ws" / "watched" / "sub" / "b.txt") << "two"; }  // followed: sub was created after the start
    fs::rename(base / "ws" / "watched" / "a.txt", base / "ws" / "watched" / "c.txt");
    pump();
    auto seen = [&events](const std::string& name, const std::string& type) {
        for (const auto& e : events)
            if (e["name"] == name && e["type"] == type) return true;
        return false;
    };
    EXPECT_TRUE(seen("a.txt", "EVENT_TYPE_CREATE"));
    EXPECT_TRUE(seen("a.txt", "EVENT_TYPE_WRITE"));
    EXPECT_TRUE(seen("sub", "EVENT_TYPE_CREATE"));
    EXPECT_TRUE(seen("sub/b.txt", "EVENT_TYPE_CREATE"));
    EXPECT_TRUE(seen("a.txt", "EVENT_TYPE_RENAME"));
    EXPECT_TRUE(seen("c.txt", "EVENT_TYPE_CREATE"));
    for (const auto& e : events) EXPECT_EQ(e["name"].get<std::string>().find("secret"), std::string::npos) << e.dump();
    EXPECT_TRUE(ended.empty());
    fs::remove_all(base / "ws" / "watched");
    pump();
    EXPECT_EQ(ended, "the watched directory was removed");
    // Not a directory, not there, or a link: refused at the start.
    { std::ofstream(base / "ws" / "file.txt") << "x"; }
    fs::create_directory_symlink(base / "outside", base / "ws" / "ln");
    for (const auto* bad : {"file.txt", "missing", "ln"})
        EXPECT_ANY_THROW(dir_watch(io, store, bad, false, watch_limits{}, walk)) << bad;
    for (auto& t : walks) t.join();
    fs::remove_all(base);
}

// Security review turn 3, H3: a subtree renamed back and forth is not walked
// again (its watches stay; only their names change), and the walks that do
// happen run where the caller says (the file pool), never on the strand.
TEST(E2bDirWatch, ARenamedSubtreeKeepsItsWatchesUnderItsNewName) {
    namespace fs = std::filesystem;
    const auto base = fs::temp_directory_path() / ("cellgate-watch-rename-" + std::to_string(::getpid()));
    fs::remove_all(base);
    fs::create_directories(base / "ws" / "w" / "t" / "d1" / "deep");
    auto store = std::make_shared<contents::contents_store>((base / "ws").string(), ::getuid(), ::getgid());
    boost::asio::io_context io;
    std::vector<std::thread> walks;
    const auto io_thread = std::this_thread::get_id();
    std::atomic<int> walked_on_io{0};
    auto walk = [&](std::function<void()> job) {
        walks.emplace_back([&walked_on_io, io_thread, job = std::move(job)] {
            if (std::this_thread::get_id() == io_thread) ++walked_on_io;
            job();
        });
        return true;
    };
    auto w = std::make_shared<dir_watch>(io, store, "w", true, watch_limits{}, walk);
    std::vector<nlohmann::json> events;
    w->start([&events](const std::vector<nlohmann::json>& got) { events.insert(events.end(), got.begin(), got.end()); },
             [](const std::string&) {});
    auto pump = [&] {
        io.restart();
        io.run_for(std::chrono::milliseconds(150));
        for (auto& t : walks) t.join();
        walks.clear();
        io.restart();
        io.run_for(std::chrono::milliseconds(50));
    };
    pump();
    for (int i = 0; i < 50; ++i) {
        fs::rename(base / "ws" / "w" / "t", base / "ws" / "w" / "u");
        fs::rename(base / "ws" / "w" / "u", base / "ws" / "w" / "t");
    }
    fs::rename(base / "ws" / "w" / "t", base / "ws" / "w" / "v");
    pump();
    events.clear();
    { std::ofstream(base / "ws" / "w" / "v" / "d1" / "deep" / "x.txt") << "x"; }
    pump();
    bool seen = false;
    for (const auto& e : events) seen = seen || (e["name"] == "v/d1/deep/x.txt" && e["type"] == "EVENT_TYPE_CREATE");
    EXPECT_TRUE(seen) << nlohmann::json(events).dump();
    EXPECT_EQ(walked_on_io.load(), 0);
    w->stop();
    pump();
    fs::remove_all(base);
}

TEST(E2bDirWatch, TheBookBoundsWatchesPerSandboxPerTenantAndInAll) {
    watch_book book(watch_limits{.per_sandbox = 2, .per_tenant = 3, .total = 4, .directories = 16, .queued_events = 10});
    unsigned status = 0;
    std::string why;
    EXPECT_TRUE(book.admit("k1", "a", status, why));
    EXPECT_TRUE(book.admit("k1", "a", status, why));
    EXPECT_FALSE(book.admit("k1", "a", status, why));
    EXPECT_EQ(status, 429u);
    EXPECT_TRUE(book.admit("k2", "a", status, why));
    EXPECT_FALSE(book.admit("k3", "a", status, why)) << "tenant a has 3";
    EXPECT_EQ(status, 429u);
    EXPECT_NE(why.find("tenant"), std::string::npos) << why;
    EXPECT_TRUE(book.admit("k4", "b", status, why)) << "another tenant still gets one";
    EXPECT_FALSE(book.admit("k5", "c", status, why));
    EXPECT_EQ(status, 503u);
    book.cancel_admission("k1");
    EXPECT_TRUE(book.admit("k3", "a", status, why));
    book.remove_session("k9");  // unknown: nothing changes
    EXPECT_FALSE(book.admit("k5", "c", status, why));
    std::string metrics;
    book.render(metrics);
    EXPECT_NE(metrics.find("cellgate_e2b_watches 4"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("cellgate_e2b_watch_tenants_at_cap 1"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace cellgate::e2b
