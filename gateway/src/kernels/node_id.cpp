#include "kernels/node_id.hpp"

#include "cellgate/protocol/message.hpp"

#include <stdexcept>

namespace cellgate::kernels {

namespace {

std::string& tag_storage() {
    static std::string tag;
    return tag;
}

bool hex(std::string_view s) {
    for (const char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

}  // namespace

bool valid_node_tag(std::string_view tag) { return tag.size() == 8 && hex(tag); }

void set_node_tag(const std::string& tag) {
    if (!tag.empty() && !valid_node_tag(tag))
        throw std::invalid_argument("a node tag is 8 lowercase hex digits (the first group of its ids), not '" +
                                    tag.substr(0, 32) + "'");
    tag_storage() = tag;
}

const std::string& node_tag() { return tag_storage(); }

std::string make_node_id() {
    auto id = protocol::make_uuid();
    if (const auto& tag = node_tag(); !tag.empty()) id.replace(0, 8, tag);
    return id;
}

std::optional<std::string> tag_of(std::string_view id) {
    if (id.size() != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-') return std::nullopt;
    if (!hex(id.substr(0, 8))) return std::nullopt;
    return std::string(id.substr(0, 8));
}

}  // namespace cellgate::kernels
