#include "cell_runner.hpp"

#include "cellgate/protocol/wire_codec.hpp"

#include <zmq.hpp>

#include <iostream>
#include <thread>

namespace cellgate::launcher {

namespace {

std::vector<std::string> receive(zmq::socket_t& s) {
    std::vector<std::string> frames;
    for (;;) {
        zmq::message_t part;
        if (!s.recv(part, zmq::recv_flags::dontwait)) break;
        frames.emplace_back(part.to_string());
        if (!part.more()) break;
    }
    return frames;
}

}  // namespace

int run_cell(const kernel_endpoints& endpoints, const std::string& code,
             std::chrono::milliseconds timeout) {
    zmq::context_t ctx(1);
    const protocol::hmac_signer signer(endpoints.key);
    zmq::socket_t shell(ctx, zmq::socket_type::dealer);
    zmq::socket_t iopub(ctx, zmq::socket_type::sub);
    shell.set(zmq::sockopt::linger, 0);
    iopub.set(zmq::sockopt::linger, 0);
    iopub.set(zmq::sockopt::subscribe, "");
    shell.connect(endpoints.shell);
    iopub.connect(endpoints.iopub);
    // A SUB socket misses what is published before its subscription reaches
    // the kernel; give the handshake a moment (the gateway instead nudges with
    // kernel_info_request until iopub answers).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));

    const std::string session = protocol::make_uuid();
    auto request = protocol::make_message(
        "execute_request",
        {{"code", code}, {"silent", false}, {"store_history", true}, {"user_expressions", nlohmann::json::object()},
         {"allow_stdin", false}, {"stop_on_error", true}},
        session);
    const auto msg_id = nlohmann::json::parse(request.header).at("msg_id").get<std::string>();
    const auto frames = protocol::encode(request, signer);
    for (std::size_t i = 0; i < frames.size(); ++i)
        (void)shell.send(zmq::buffer(frames[i]),
                         i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);

    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool idle = false, replied = false;
    int rc = 0;
    while (!(idle && replied)) {
        if (std::chrono::steady_clock::now() > deadline) {
            std::cerr << "cellgate-launch: no result before the timeout\n";
            return 2;
        }
        zmq::pollitem_t items[] = {{shell.handle(), 0, ZMQ_POLLIN, 0}, {iopub.handle(), 0, ZMQ_POLLIN, 0}};
        zmq::poll(items, 2, std::chrono::milliseconds(100));
        if (items[0].revents & ZMQ_POLLIN) {
            auto d = protocol::decode(receive(shell), signer);
            if (d && d.fields.parent_msg_id == msg_id) {
                replied = true;
                const auto content = nlohmann::json::parse(d.msg.content);
                if (content.value("status", "") != "ok") rc = 1;
            }
        }
        if (items[1].revents & ZMQ_POLLIN) {
            auto d = protocol::decode(receive(iopub), signer);
            if (!d || d.fields.parent_msg_id != msg_id) continue;
            const auto content = nlohmann::json::parse(d.msg.content);
            const auto& type = d.fields.msg_type;
            if (type == "stream") {
                (content.value("name", "") == "stderr" ? std::cerr : std::cout)
                    << content.value("text", "") << std::flush;
            } else if (type == "execute_result" || type == "display_data") {
                const auto& data = content.at("data");
                for (const auto& [mime, value] : data.items()) {
                    if (mime == "text/plain" && data.size() == 1)
                        std::cout << value.get<std::string>() << "\n";
                    else if (mime != "text/plain")
                        std::cout << "[" << mime << ": " << value.dump().size() << " bytes]\n";
                }
            } else if (type == "error") {
                for (const auto& line : content.at("traceback")) std::cerr << line.get<std::string>() << "\n";
                rc = 1;
            } else if (type == "status" && content.value("execution_state", "") == "idle") {
                idle = true;
            }
        }
    }
    return rc;
}

}  // namespace cellgate::launcher
