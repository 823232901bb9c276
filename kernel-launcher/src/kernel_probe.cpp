#include "kernel_probe.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/protocol/wire_codec.hpp"

#include <sys/stat.h>
#include <zmq.hpp>

#include <thread>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

zmq::context_t& probe_context() {
    static zmq::context_t context(1);
    return context;
}

// A kernel_info_reply is a few KiB in ~6 frames. The kernel is tenant code
// (M1), and this may run as root, so the socket holds as little as libzmq lets
// us ask for. What libzmq still allows: the HWM counts whole messages and
// maxmsgsize limits each frame, so one message in progress may still have any
// number of frames of up to `probe_max_frame_bytes` each, all buffered before
// the first is readable; the deadline ends the probe but not that buffering.
// That memory is the launcher's, outside the kernel's cgroup; moving the probe
// to an unprivileged helper (or the gateway) is the remaining fix.
constexpr std::int64_t probe_max_frame_bytes = 64 << 10;
constexpr int probe_rcvhwm = 2;
constexpr std::size_t probe_max_frames = 16;  // identities, delimiter, 5 parts, spare

// Reads one message; frames past `probe_max_frames` are received and dropped
// (that frees them) so a long message cannot pass for the next one.
std::vector<std::string> recv_bounded(zmq::socket_t& shell, clock_type::time_point deadline) {
    std::vector<std::string> frames;
    bool oversized = false;
    for (;;) {
        zmq::message_t part;
        if (!shell.recv(part, zmq::recv_flags::dontwait)) break;
        if (frames.size() < probe_max_frames) frames.emplace_back(part.to_string());
        else oversized = true;
        if (!part.more() || clock_type::now() >= deadline) break;
    }
    if (oversized) frames.clear();  // decode() reports an empty message as malformed
    return frames;
}

}  // namespace

void wait_for_sockets(const fs::path& kernel_dir, clock_type::time_point deadline,
                      const liveness_check& alive) {
    for (;;) {
        bool all = true;
        for (const char* name : socket_names) {
            struct stat st{};
            all = all && ::lstat((kernel_dir / name).c_str(), &st) == 0;
        }
        if (all) return;
        if (auto why = alive(); !why.empty())
            throw launch_error("wait-for-sockets", "the kernel stopped before binding its sockets: " + why);
        if (clock_type::now() >= deadline)
            throw launch_error("wait-for-sockets", "the kernel did not bind its sockets in time", ETIMEDOUT);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

void verify_sockets(const fs::path& kernel_dir) {
    for (const char* name : socket_names) {
        struct stat st{};
        if (::lstat((kernel_dir / name).c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
            throw launch_error("lock-kernel-dir",
                               std::string(name) + " in the kernel's run dir is not a socket", EPERM);
    }
}

nlohmann::json request_kernel_info(const kernel_endpoints& endpoints, clock_type::time_point deadline,
                                   const liveness_check& alive) {
    const protocol::hmac_signer signer(endpoints.key);
    zmq::socket_t shell(probe_context(), zmq::socket_type::dealer);
    shell.set(zmq::sockopt::linger, 0);
    shell.set(zmq::sockopt::maxmsgsize, probe_max_frame_bytes);
    shell.set(zmq::sockopt::rcvhwm, probe_rcvhwm);
    shell.set(zmq::sockopt::rcvbuf, static_cast<int>(probe_max_frame_bytes));
    shell.connect(endpoints.shell);
    const std::string session = protocol::make_uuid();
    std::vector<std::string> sent_ids;
    auto next_send = clock_type::now();
    std::string last_problem;

    for (;;) {
        const auto now = clock_type::now();
        if (now >= deadline)
            throw launch_error("kernel-info",
                               "no kernel_info_reply before the deadline" +
                                   (last_problem.empty() ? "" : " (" + last_problem + ")"),
                               ETIMEDOUT);
        if (now >= next_send) {
            auto msg = protocol::make_message("kernel_info_request", nlohmann::json::object(), session);
            sent_ids.push_back(nlohmann::json::parse(msg.header).at("msg_id").get<std::string>());
            const auto frames = protocol::encode(msg, signer);
            for (std::size_t i = 0; i < frames.size(); ++i)
                (void)shell.send(zmq::buffer(frames[i]),
                                 i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
            next_send = now + std::chrono::seconds(1);
        }
        zmq::pollitem_t item{shell.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(20));
        if ((item.revents & ZMQ_POLLIN) == 0) {
            if (auto why = alive(); !why.empty())
                throw launch_error("kernel-info", "the kernel stopped before answering: " + why);
            continue;
        }
        auto frames = recv_bounded(shell, deadline);
        auto decoded = protocol::decode(std::move(frames), signer);
        if (!decoded) {
            last_problem = "dropped a reply: " + std::string(protocol::to_string(decoded.error));
            continue;
        }
        if (decoded.fields.msg_type != "kernel_info_reply" ||
            std::find(sent_ids.begin(), sent_ids.end(), decoded.fields.parent_msg_id) == sent_ids.end())
            continue;
        return nlohmann::json::parse(decoded.msg.content, nullptr, false);
    }
}

}  // namespace cellgate::launcher
