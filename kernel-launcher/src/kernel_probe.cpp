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
    shell.set(zmq::sockopt::maxmsgsize, std::int64_t{1} << 20);
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
        std::vector<std::string> frames;
        for (;;) {
            zmq::message_t part;
            if (!shell.recv(part, zmq::recv_flags::dontwait)) break;
            frames.emplace_back(part.to_string());
            if (!part.more() || frames.size() > 64) break;
        }
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
