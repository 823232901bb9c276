// A kernel's client sessions: a connection that takes a session over keeps
// it when the connection it replaced lets go afterwards.
#include "kernels/kernel.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

using namespace cellgate;

namespace {

struct recording_subscriber : kernels::kernel_subscriber {
    std::vector<messaging::kernel_message_ptr> got;
    std::vector<std::string> closed;
    void deliver(messaging::kernel_message_ptr m) override { got.push_back(std::move(m)); }
    void kernel_closed(const std::string& reason) override { closed.push_back(reason); }
};

messaging::kernel_message_ptr message(const char* text) {
    return messaging::make_gateway_message(messaging::channel::iopub, "stream", {{"name", "stdout"}, {"text", text}},
                                         "s", "{}");
}

}  // namespace

TEST(kernel_sessions, a_session_taken_over_stays_with_the_new_connection_when_the_old_one_lets_go) {
    wire::zmq_reactor reactor;
    metrics::registry metrics;
    kernels::kernel k("11111111-0000-4000-8000-000000000001", "python3", "t", reactor, kernels::kernel_settings{},
                      metrics);
    auto old_socket = std::make_shared<recording_subscriber>();
    auto new_socket = std::make_shared<recording_subscriber>();
    const auto first = k.attach("jupyterlab-session", old_socket);
    ASSERT_NE(first.set_id, 0u);
    // JupyterLab reconnects on a restart: its new socket attaches while the
    // old one's close is still on its way.
    const auto second = k.attach("jupyterlab-session", new_socket);
    EXPECT_EQ(second.set_id, first.set_id);
    EXPECT_EQ(old_socket->closed.size(), 1u);
    // Then the old socket lets go, with a message it never wrote.
    k.detach(first.set_id, old_socket.get(), {message("never written")});
    ASSERT_EQ(new_socket->got.size(), 1u);  // handed to the connection that has the session now
    // The new connection still has the session: what comes next reaches it.
    k.requeue(first.set_id, message("after"));
    EXPECT_EQ(new_socket->got.size(), 2u);
    EXPECT_TRUE(old_socket->got.empty());

    // The connection that has the session letting go detaches it: later
    // messages wait in its buffer for a reconnect.
    k.detach(first.set_id, new_socket.get(), {});
    k.requeue(first.set_id, message("buffered"));
    EXPECT_EQ(new_socket->got.size(), 2u);
    const auto third = k.attach("jupyterlab-session", old_socket);
    EXPECT_EQ(third.replayed, 1u);
}
