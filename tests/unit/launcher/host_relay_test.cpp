// The host relay's loop over real descriptors: pipes stand in for the
// sandbox's stdio and the test plays the sandbox side; clients connect to the
// unix sockets the relay makes in a temporary directory.
#include "relay/host_relay.hpp"
#include "relay/relay_protocol.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

using namespace cellgate::launcher::relay;
namespace fs = std::filesystem;

namespace {

constexpr int wait_ms = 5000;  // a bound for a broken relay, never a pause

class host_relay_test : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("cellgate-relay-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
        ASSERT_EQ(::pipe(to_relay_), 0);
        ASSERT_EQ(::pipe(from_relay_), 0);
        host_relay_options o;
        o.socket_dir = dir_;
        o.from_sandbox = to_relay_[0];
        o.to_sandbox = from_relay_[1];
        o.log = [this](const std::string& line) {
            if (line.find("ready") != std::string::npos) ready_.set_value();
        };
        options_ = o;
        result_ = std::async(std::launch::async, [this] { return run_host_relay(options_); });
    }

    void TearDown() override {
        if (to_relay_[1] >= 0) ::close(to_relay_[1]);  // ends the relay if a test did not
        if (result_.valid()) result_.wait_for(std::chrono::milliseconds(wait_ms));
        for (int fd : {to_relay_[0], from_relay_[0], from_relay_[1]}) ::close(fd);
        fs::remove_all(dir_);
    }

    void send(frame_type t, std::uint32_t stream, std::string_view payload = {}) {
        std::string f;
        append_frame(f, t, stream, payload);
        send_raw(f);
    }
    void send_raw(const std::string& bytes) { ASSERT_EQ(::write(to_relay_[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size())); }

    void start() {
        send(frame_type::hello, 0, hello_payload);
        send(frame_type::ready, 0);
        ASSERT_EQ(ready_.get_future().wait_for(std::chrono::milliseconds(wait_ms)), std::future_status::ready);
    }

    // Reads exactly n bytes from `fd`, or fewer if it ends or stalls.
    static std::string read_n(int fd, std::size_t n) {
        std::string out;
        while (out.size() < n) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, wait_ms) <= 0) break;
            char buf[4096];
            const ssize_t got = ::read(fd, buf, std::min(sizeof buf, n - out.size()));
            if (got <= 0) break;
            out.append(buf, static_cast<std::size_t>(got));
        }
        return out;
    }

    struct frame_read {
        frame_type type;
        std::uint32_t stream;
        std::string payload;
    };
    frame_read next_frame() {
        const auto head = read_n(from_relay_[0], header_bytes);
        EXPECT_EQ(head.size(), header_bytes);
        if (head.size() != header_bytes) return {frame_type::close, 0, ""};
        frame_header h;
        EXPECT_EQ(parse_header(head, h), std::nullopt);
        return {h.type, h.stream, read_n(from_relay_[0], h.length)};
    }

    int connect_to(int channel) {
        const auto path = dir_ / ("k-" + std::to_string(channel + 1));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
        return fd;
    }

    host_relay_result finish() {
        EXPECT_EQ(result_.wait_for(std::chrono::milliseconds(wait_ms)), std::future_status::ready);
        return result_.get();
    }

    fs::path dir_;
    int to_relay_[2] = {-1, -1};
    int from_relay_[2] = {-1, -1};
    host_relay_options options_;
    std::promise<void> ready_;
    std::future<host_relay_result> result_;
};

}  // namespace

TEST_F(host_relay_test, no_socket_exists_before_the_sandbox_is_ready) {
    send(frame_type::hello, 0, hello_payload);
    // The relay has read hello (the pipe is empty again) and made nothing.
    ::close(to_relay_[1]);
    to_relay_[1] = -1;
    const auto r = finish();
    EXPECT_FALSE(r.protocol_error);
    EXPECT_EQ(r.reason, "the sandbox closed its output");
    EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(host_relay_test, a_connection_becomes_a_stream_both_ways) {
    start();
    const int client = connect_to(3);
    ASSERT_EQ(::write(client, "ping", 4), 4);
    auto f = next_frame();
    EXPECT_EQ(f.type, frame_type::open);
    EXPECT_EQ(f.stream, 1u);
    EXPECT_EQ(f.payload, std::string(1, '\x03'));
    f = next_frame();
    EXPECT_EQ(f.type, frame_type::data);
    EXPECT_EQ(f.payload, "ping");

    send(frame_type::data, 1, "pong");
    EXPECT_EQ(read_n(client, 4), "pong");
    f = next_frame();
    EXPECT_EQ(f.type, frame_type::credit) << "what the client took is credited back";
    EXPECT_EQ(read_u32(f.payload), 4u);

    send(frame_type::close, 1);
    EXPECT_EQ(read_n(client, 1), "") << "the sandbox closed the stream: the client sees the end";
    ::close(client);
}

TEST_F(host_relay_test, a_client_hanging_up_closes_its_stream) {
    start();
    const int client = connect_to(0);
    EXPECT_EQ(next_frame().type, frame_type::open);
    ::close(client);
    const auto f = next_frame();
    EXPECT_EQ(f.type, frame_type::close);
    EXPECT_EQ(f.stream, 1u);
}

TEST_F(host_relay_test, garbage_ends_the_relay_and_removes_its_sockets) {
    start();
    const int client = connect_to(0);
    EXPECT_EQ(next_frame().type, frame_type::open);
    send_raw(std::string(32, '\xff'));
    const auto r = finish();
    EXPECT_TRUE(r.protocol_error);
    EXPECT_EQ(r.reason, "protocol error from the sandbox: unknown frame type 255");
    EXPECT_TRUE(fs::is_empty(dir_)) << "its sockets are gone";
    EXPECT_EQ(read_n(client, 1), "") << "and its clients are closed";
    ::close(client);
}

TEST_F(host_relay_test, data_for_a_stream_never_opened_ends_the_relay) {
    start();
    send(frame_type::data, 9, "x");
    const auto r = finish();
    EXPECT_TRUE(r.protocol_error);
    EXPECT_EQ(r.reason, "protocol error from the sandbox: data for stream 9, which was never opened");
}
