#include "fake_kernel.hpp"

#include "cellgate/protocol/message.hpp"
#include "cellgate/protocol/wire_codec.hpp"

#include <zmq_addon.hpp>

#include <vector>

namespace cellgate::fakes {

namespace {

launcher::kernel_endpoints endpoints_in(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    const auto ep = [&](const char* name) { return "ipc://" + (dir / name).string(); };
    launcher::kernel_endpoints e;
    e.shell = ep("shell");
    e.iopub = ep("iopub");
    e.stdin_ = ep("stdin");
    e.control = ep("control");
    e.hb = ep("hb");
    e.key = protocol::make_kernel_key();
    return e;
}

nlohmann::json reply_content(const std::string& msg_type, const nlohmann::json& request, int execution_count) {
    if (msg_type == "kernel_info_request")
        return {{"status", "ok"},
                {"protocol_version", protocol::protocol_version},
                {"implementation", "fake_kernel"},
                {"implementation_version", "1"},
                {"language_info", {{"name", "python"}, {"version", "3"}, {"file_extension", ".py"}}},
                {"banner", "a fake kernel"}};
    if (msg_type == "execute_request")
        return {{"status", "ok"}, {"execution_count", execution_count}, {"user_expressions", nlohmann::json::object()}};
    return {{"status", "ok"}, {"restart", request.value("restart", false)}};  // shutdown_request
}

void send_frames(zmq::socket_t& socket, const std::vector<std::string>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
        const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        (void)socket.send(zmq::buffer(frames[i]), more);
    }
}

}  // namespace

fake_kernel::fake_kernel(const std::filesystem::path& dir, bool muted)
    : endpoints_(endpoints_in(dir)), signer_(endpoints_.key), session_(protocol::make_uuid()), muted_(muted),
      shell_(ctx_, zmq::socket_type::router), control_(ctx_, zmq::socket_type::router),
      stdin_(ctx_, zmq::socket_type::router), iopub_(ctx_, zmq::socket_type::pub),
      // ipykernel's heartbeat is a ROUTER echoing what it gets: the gateway
      // pings from a DEALER, without an envelope a REP would need.
      hb_(ctx_, zmq::socket_type::router) {
    for (auto* s : {&shell_, &control_, &stdin_, &iopub_, &hb_}) s->set(zmq::sockopt::linger, 0);
    shell_.bind(endpoints_.shell);
    control_.bind(endpoints_.control);
    stdin_.bind(endpoints_.stdin_);
    iopub_.bind(endpoints_.iopub);
    hb_.bind(endpoints_.hb);
    thread_ = std::thread([this] { run(); });
}

fake_kernel::~fake_kernel() { stop(); }

void fake_kernel::stop() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    thread_.join();
    for (auto* s : {&shell_, &control_, &stdin_, &iopub_, &hb_}) s->close();
}

void fake_kernel::run() {
    if (muted_) {  // nothing is read: requests and pings wait in the sockets
        while (!stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return;
    }
    std::vector<zmq::pollitem_t> items = {{shell_.handle(), 0, ZMQ_POLLIN, 0},
                                          {control_.handle(), 0, ZMQ_POLLIN, 0},
                                          {hb_.handle(), 0, ZMQ_POLLIN, 0}};
    // A short timeout only so that stop() is seen soon.
    while (!stopping_) {
        zmq::poll(items, std::chrono::milliseconds(10));
        if (items[0].revents & ZMQ_POLLIN) answer(shell_);
        if (items[1].revents & ZMQ_POLLIN) answer(control_);
        if (items[2].revents & ZMQ_POLLIN) echo();
    }
}

void fake_kernel::answer(zmq::socket_t& socket) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(socket, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
    std::vector<std::string> frames;
    for (const auto& p : parts) frames.push_back(p.to_string());
    auto request = protocol::decode(std::move(frames), signer_);
    if (!request) return;  // mis-signed or malformed: dropped, as ipykernel does (the test sees no reply)
    const auto& type = request.fields.msg_type;
    if (type != "kernel_info_request" && type != "execute_request" && type != "shutdown_request") return;
    if (type == "execute_request") ++execution_count_;
    publish_status("busy", request.msg.header);
    const auto content = nlohmann::json::parse(request.msg.content);
    auto reply = protocol::make_message(type.substr(0, type.size() - std::string_view("request").size()) + "reply",
                                        reply_content(type, content, execution_count_), session_, "kernel",
                                        request.msg.header);
    reply.identities = std::move(request.msg.identities);
    send_frames(socket, protocol::encode(reply, signer_));
    publish_status("idle", request.msg.header);
}

void fake_kernel::echo() {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(hb_, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
    if (!heartbeat_stopped_) (void)zmq::send_multipart(hb_, parts);
}

void fake_kernel::publish_status(const char* execution_state, const std::string& parent_header) {
    auto status = protocol::make_message("status", {{"execution_state", execution_state}}, session_, "kernel",
                                         parent_header);
    status.identities = {"kernel." + session_ + ".status"};  // the topic; the gateway subscribes to all
    send_frames(iopub_, protocol::encode(status, signer_));
}

}  // namespace cellgate::fakes
