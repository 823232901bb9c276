#include "wire/zmq_reactor.hpp"

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <set>
#include <mutex>
#include <thread>

using namespace cellgate;

namespace {

// A kernel's five endpoints in a private temp dir; only hb answers (a
// ROUTER echoing what it gets, as ipykernel's heartbeat does).
struct fake_kernel {
    std::filesystem::path dir;
    launcher::kernel_endpoints endpoints;
    zmq::context_t ctx{1};
    zmq::socket_t hb{ctx, zmq::socket_type::router};
    zmq::socket_t iopub{ctx, zmq::socket_type::pub};
    std::thread echo;
    std::atomic<bool> stop{false};
    std::atomic<bool> unsolicited{false};  // send one echo without a ping, from the echo thread

    fake_kernel() {
        char tmpl[] = "/tmp/cellgate-reactor-test-XXXXXX";
        dir = ::mkdtemp(tmpl);
        const auto ep = [&](const char* name) { return "ipc://" + (dir / name).string(); };
        endpoints = {ep("shell"), ep("iopub"), ep("stdin"), ep("control"), ep("hb"), "key", "hmac-sha256", ""};
        hb.set(zmq::sockopt::rcvtimeo, 50);
        hb.bind(endpoints.hb);
        iopub.bind(endpoints.iopub);
        echo = std::thread([this] {
            std::string peer;
            while (!stop) {
                if (unsolicited.exchange(false) && !peer.empty()) {
                    hb.send(zmq::buffer(peer), zmq::send_flags::sndmore);
                    hb.send(zmq::str_buffer("ping"));
                }
                std::vector<zmq::message_t> parts;
                zmq::message_t m;
                if (!hb.recv(m)) continue;
                peer = m.to_string();
                parts.push_back(std::move(m));
                while (parts.back().more()) {
                    zmq::message_t more;
                    (void)hb.recv(more);
                    parts.push_back(std::move(more));
                }
                for (std::size_t i = 0; i < parts.size(); ++i)
                    hb.send(parts[i], i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
            }
        });
    }
    ~fake_kernel() {
        stop = true;
        echo.join();
        std::filesystem::remove_all(dir);
    }
};

// Counts heartbeats seen by the reactor; waits for the next one (bounded).
struct heartbeats {
    std::mutex m;
    std::condition_variable cv;
    int seen = 0;
    wire::zmq_reactor::kernel_handlers handlers() {
        wire::zmq_reactor::kernel_handlers h;
        h.on_heartbeat = [this] {
            std::lock_guard lock(m);
            ++seen;
            cv.notify_all();
        };
        return h;
    }
    // Pings until one more echo comes back: every command posted before
    // has then run (commands of a wake-up run before the next echo is read).
    bool round_trip(wire::zmq_reactor& r, const std::string& id) {
        std::unique_lock lock(m);
        const int before = seen;
        for (int i = 0; i < 100; ++i) {
            lock.unlock();
            r.ping(id);
            lock.lock();
            if (cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return seen > before; })) return true;
        }
        return false;
    }
};

}  // namespace

// H3: the second socket of a channel set fails (libzmq's socket cap, as
// EMFILE would). The first must not stay in the epoll set or on the ready
// list (it used to: a freed pointer served on the next turn), and the
// reactor must go on serving the kernel.
TEST(zmq_reactor, a_half_made_channel_set_leaves_nothing_watched) {
    fake_kernel k;
    heartbeats hb;
    wire::zmq_reactor::options opts;
    opts.max_sockets = 3;  // iopub, hb, then shell; control is refused
    wire::zmq_reactor r(opts);
    r.start();
    r.add_kernel("k", k.endpoints, hb.handlers());
    ASSERT_TRUE(hb.round_trip(r, "k"));
    EXPECT_EQ(r.counters().watched, 2u);

    r.open_channels("k", 1);
    ASSERT_TRUE(hb.round_trip(r, "k"));
    EXPECT_EQ(r.counters().watched, 2u);  // shell was made, then dropped unwatched
    // More turns over whatever the failure left behind.
    ASSERT_TRUE(hb.round_trip(r, "k"));
    r.send("k", 1, messaging::channel::shell, protocol::make_message("kernel_info_request", nlohmann::json::object(), "s"));
    ASSERT_TRUE(hb.round_trip(r, "k"));
    r.stop();
}

// H1: heartbeats are served before data and between data messages. The
// reactor is held in a handler while six kernels queue 2 MiB messages and
// one heartbeat echo arrives last. The echo must be seen before the data,
// not after every other kernel's share of the turn (it used to come after
// all 18 messages: with enough busy sockets a turn outlasts the 30 s
// heartbeat timeout and healthy kernels are declared dead).
TEST(zmq_reactor, a_heartbeat_is_seen_before_a_turn_of_other_kernels_data) {
    wire::zmq_reactor r;
    r.start();
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::string> events;
    bool holding = false, release = false;
    auto record = [&](std::string e) {
        std::lock_guard lock(m);
        events.push_back(std::move(e));
        cv.notify_all();
    };

    fake_kernel blocker;
    wire::zmq_reactor::kernel_handlers bh;
    bh.on_dropped = [&](const std::string&) {
        std::unique_lock lock(m);
        holding = true;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
    };
    r.add_kernel("blocker", blocker.endpoints, bh);

    std::vector<std::unique_ptr<fake_kernel>> busy;
    heartbeats hb;
    for (int i = 0; i < 6; ++i) {
        busy.push_back(std::make_unique<fake_kernel>());
        wire::zmq_reactor::kernel_handlers h = i == 0 ? hb.handlers() : wire::zmq_reactor::kernel_handlers{};
        if (i == 0) h.on_heartbeat = [&, inner = h.on_heartbeat] { inner(); record("hb"); };
        h.on_dropped = [&, i](const std::string&) { record("drop " + std::to_string(i)); };
        r.add_kernel("k" + std::to_string(i), busy.back()->endpoints, h);
    }
    ASSERT_TRUE(hb.round_trip(r, "k0"));  // k0's hb peer is known to its echo thread
    // Subscriptions reach each publisher asynchronously: publish until a first drop from each.
    const std::string probe = "not a jupyter message";
    for (int tries = 0; tries < 200; ++tries) {
        std::set<std::string> seen;
        {
            std::lock_guard lock(m);
            seen.insert(events.begin(), events.end());
        }
        bool all = true;
        for (int i = 0; i < 6; ++i) all = all && seen.count("drop " + std::to_string(i));
        if (all) break;
        for (auto& k : busy) k->iopub.send(zmq::buffer(probe));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (int tries = 0; tries < 200; ++tries) {  // the blocker's subscription too
        blocker.iopub.send(zmq::buffer(probe));
        std::unique_lock lock(m);
        if (cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return holding; })) break;
    }
    {
        std::lock_guard lock(m);
        ASSERT_TRUE(holding);
        events.clear();
    }
    const std::string big(2u << 20, 'd');
    for (auto& k : busy)
        for (int j = 0; j < 3; ++j) k->iopub.send(zmq::buffer(big));
    busy[0]->unsolicited = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let it all arrive (not asserted on)
    {
        std::lock_guard lock(m);
        release = true;
        cv.notify_all();
    }
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] {
        return std::count(events.begin(), events.end(), std::string("hb")) >= 1 && events.size() >= 19;
    })) << events.size();
    const auto at = std::find(events.begin(), events.end(), std::string("hb")) - events.begin();
    EXPECT_LT(at, 3) << "the heartbeat was seen after " << at << " data messages";
    lock.unlock();
    r.stop();
}
