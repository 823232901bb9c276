#include "messaging/kernel_message.hpp"

#include "messaging/json_peek.hpp"

namespace cellgate::messaging {

std::shared_ptr<kernel_message> make_gateway_message(channel chan, std::string_view msg_type,
                                                     const nlohmann::json& content, std::string_view session,
                                                     const std::string& parent_header) {
    auto m = std::make_shared<kernel_message>();
    m->chan = chan;
    m->msg = protocol::make_message(msg_type, content, session, "cellgate", parent_header);
    const auto header = nlohmann::json::parse(m->msg.header);
    m->fields.msg_id = header.at("msg_id").get<std::string>();
    m->fields.msg_type = std::string(msg_type);
    m->fields.session = header.at("session").get<std::string>();
    m->fields.parent_msg_id = json_peek::string_member(parent_header, "msg_id").value_or("");
    return m;
}

}  // namespace cellgate::messaging
