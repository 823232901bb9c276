#include "wire/zmtp_guard.hpp"

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

using namespace cellgate::wire;

namespace {

constexpr std::size_t MiB = 1u << 20;

long rss_bytes() {
    FILE* f = std::fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    while (f && std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "VmRSS:", 6) == 0) kb = std::atol(line + 6);
    if (f) std::fclose(f);
    return kb * 1024;
}

struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        char tmpl[] = "/tmp/cellgate-guard-test-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_dir() { std::filesystem::remove_all(path); }
};

struct refusals {
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::string> seen;
    zmtp_guard::refused_handler handler() {
        return [this](const std::string& label, std::string_view why) {
            std::lock_guard lock(m);
            seen.push_back(label + ": " + std::string(why));
            cv.notify_all();
        };
    }
    bool wait_for_one() {
        std::unique_lock lock(m);
        return cv.wait_for(lock, std::chrono::seconds(20), [&] { return !seen.empty(); });
    }
};

void no_free(void*, void*) {}

// Receives one whole message (bounded wait); its bytes.
std::size_t receive(zmq::socket_t& s, int timeout_ms = 10000) {
    s.set(zmq::sockopt::rcvtimeo, timeout_ms);
    std::size_t bytes = 0;
    for (;;) {
        zmq::message_t m;
        if (!s.recv(m)) return 0;
        bytes += m.size();
        if (!m.more()) return bytes;
    }
}

}  // namespace

// H1: one message of 100 frames of 1 MiB, all from one buffer, as a hostile
// kernel sends it. Without the guard, libzmq holds all 100 MiB before the
// reader sees a frame (review, appendix A); through it, the connection is
// closed once the message passes 8 MiB, and the gateway's side holds
// about that much at most.
TEST(zmtp_guard, a_message_of_many_large_frames_is_cut_off_before_libzmq_holds_it) {
    temp_dir dir;
    refusals refused;
    zmtp_guard guard(refused.handler(), dir.path);
    const std::string kernel = "ipc://" + (dir.path / "iopub").string();
    zmq::context_t ctx{1};
    zmq::socket_t pub(ctx, zmq::socket_type::pub);
    pub.bind(kernel);
    auto lease = guard.open(kernel, {64, 8 * MiB, 64u << 10}, 9 * MiB, "k1");
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(lease->endpoint());

    // A small message gets through (and shows the subscription is up).
    std::size_t got = 0;
    for (int i = 0; i < 200 && got == 0; ++i) {
        pub.send(zmq::str_buffer("hello"));
        got = receive(sub, 50);
    }
    ASSERT_EQ(got, 5u);
    lease->consumed(got);

    static char frame[MiB];
    std::memset(frame, 'x', sizeof frame);
    const long before = rss_bytes();
    for (int i = 0; i < 100; ++i) {
        zmq::message_t m(frame, sizeof frame, no_free, nullptr);
        (void)pub.send(m, i + 1 < 100 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    ASSERT_TRUE(refused.wait_for_one());
    EXPECT_EQ(refused.seen[0], "k1: message too large");
    EXPECT_EQ(guard.closed_connections(), 1u);
    EXPECT_LT(rss_bytes() - before, static_cast<long>(32 * MiB));  // was 100 MiB and more
    // Nothing of the bomb reaches the reader; after libzmq reconnects, traffic flows again.
    got = 0;
    for (int i = 0; i < 200 && got == 0; ++i) {
        pub.send(zmq::str_buffer("again"));
        got = receive(sub, 50);
    }
    EXPECT_EQ(got, 5u);
}

// Messages bigger than the window's share still pass, one at a time, as
// the reader consumes them: the window never deadlocks a message.
TEST(zmtp_guard, messages_larger_than_half_the_window_all_arrive_as_they_are_consumed) {
    temp_dir dir;
    zmtp_guard guard({}, dir.path);
    const std::string kernel = "ipc://" + (dir.path / "shell").string();
    zmq::context_t ctx{1};
    zmq::socket_t router(ctx, zmq::socket_type::router);
    router.bind(kernel);
    auto lease = guard.open(kernel, {64, 8 * MiB, 64u << 10}, 9 * MiB, "k1");
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.connect(lease->endpoint());
    dealer.send(zmq::str_buffer("hi"));  // the gateway's direction, relayed as is
    zmq::message_t id, hi;
    router.set(zmq::sockopt::rcvtimeo, 10000);
    ASSERT_TRUE(router.recv(id));
    ASSERT_TRUE(router.recv(hi));
    EXPECT_EQ(hi.to_string(), "hi");

    const std::string big(6 * MiB, 'b');
    std::thread sender([&] {
        for (int i = 0; i < 10; ++i) {
            router.send(zmq::buffer(id.to_string()), zmq::send_flags::sndmore);
            router.send(zmq::buffer(big));
        }
    });
    for (int i = 0; i < 10; ++i) {
        const auto n = receive(dealer);
        ASSERT_EQ(n, big.size()) << i;
        lease->consumed(n);
    }
    sender.join();
    EXPECT_EQ(guard.closed_connections(), 0u);
}

// The good messages that arrive in the same read as a refused one are the
// kernel's own output: they reach the reader before the connection closes.
TEST(zmtp_guard, messages_before_a_refused_one_in_the_same_read_still_arrive) {
    temp_dir dir;
    refusals refused;
    zmtp_guard guard(refused.handler(), dir.path);
    const std::string kernel = "ipc://" + (dir.path / "iopub").string();
    zmq::context_t ctx{1};
    zmq::socket_t pub(ctx, zmq::socket_type::pub);
    pub.bind(kernel);
    auto lease = guard.open(kernel, {64, 8 * MiB, 64u << 10}, 9 * MiB, "k1");
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(lease->endpoint());
    std::size_t got = 0;
    for (int i = 0; i < 200 && got == 0; ++i) {
        pub.send(zmq::str_buffer("hello"));
        got = receive(sub, 50);
    }
    ASSERT_EQ(got, 5u);
    while (receive(sub, 100) != 0) {  // stray hellos
    }
    // Small enough that libzmq writes it all at once: 7 messages, then 100 one-byte frames.
    for (int i = 0; i < 7; ++i) pub.send(zmq::str_buffer("good"));
    for (int i = 0; i < 100; ++i) pub.send(zmq::str_buffer("x"), i + 1 < 100 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    ASSERT_TRUE(refused.wait_for_one());
    EXPECT_EQ(refused.seen[0], "k1: too many frames in one message");
    for (int i = 0; i < 7; ++i) EXPECT_EQ(receive(sub, 5000), 4u) << i;
}
