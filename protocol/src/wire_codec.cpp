#include "cellgate/protocol/wire_codec.hpp"

#include <algorithm>

namespace cellgate::protocol {

std::string_view to_string(decode_error e) noexcept {
    switch (e) {
    case decode_error::none: return "none";
    case decode_error::too_many_frames: return "too many frames";
    case decode_error::frame_too_large: return "frame too large";
    case decode_error::message_too_large: return "message too large";
    case decode_error::no_delimiter: return "no <IDS|MSG> delimiter";
    case decode_error::too_few_parts: return "too few parts after the delimiter";
    case decode_error::bad_signature: return "bad signature";
    case decode_error::bad_json: return "malformed JSON";
    case decode_error::bad_schema: return "message does not match the schema";
    }
    return "unknown";
}

namespace {

decode_result fail(decode_error e, std::string detail) {
    decode_result r;
    r.error = e;
    r.detail = std::move(detail);
    return r;
}

bool is_json_object_text(std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r\n");
    return first != std::string_view::npos && text[first] == '{' &&
           nlohmann::json::accept(text.begin(), text.end());
}

bool string_field(const nlohmann::json& obj, const char* key, std::string* out) {
    const auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) return false;
    if (out != nullptr) *out = it->get<std::string>();
    return true;
}

}  // namespace

decode_result decode(std::vector<std::string>&& frames, const hmac_signer& signer,
                     const decode_limits& limits) {
    // 1. Count and sizes, before looking at any content.
    if (frames.size() > limits.max_frames)
        return fail(decode_error::too_many_frames, std::to_string(frames.size()) + " frames");
    std::size_t total = 0;
    for (const auto& f : frames) {
        if (f.size() > std::max(limits.max_json_part_bytes, limits.max_buffer_bytes))
            return fail(decode_error::frame_too_large, std::to_string(f.size()) + " bytes");
        total += f.size();
    }
    if (total > limits.max_message_bytes)
        return fail(decode_error::message_too_large, std::to_string(total) + " bytes");

    // 2. Delimiter and part count.
    const auto delim = std::find(frames.begin(), frames.end(), delimiter);
    if (delim == frames.end()) return fail(decode_error::no_delimiter, {});
    const auto n_ids = static_cast<std::size_t>(delim - frames.begin());
    if (n_ids > limits.max_identities)
        return fail(decode_error::too_many_frames, std::to_string(n_ids) + " identities");
    const std::size_t first = n_ids + 1;  // signature
    if (frames.size() < first + 5)
        return fail(decode_error::too_few_parts,
                    std::to_string(frames.size() - first) + " parts after the delimiter");
    for (std::size_t i = first + 1; i < first + 5; ++i)
        if (frames[i].size() > limits.max_json_part_bytes)
            return fail(decode_error::frame_too_large, "JSON part of " +
                                                           std::to_string(frames[i].size()) +
                                                           " bytes");

    // 3. Signature over the four JSON parts.
    if (!signer.verify(frames[first], frames[first + 1], frames[first + 2], frames[first + 3],
                       frames[first + 4]))
        return fail(decode_error::bad_signature, {});

    // 4. JSON parse, then 5. schema. The parser stops at a NUL byte, so a part
    // holding one would pass with trailing junk that later breaks clients.
    for (std::size_t i = first + 1; i < first + 5; ++i)
        if (frames[i].find('\0') != std::string::npos)
            return fail(decode_error::bad_json, "NUL byte in a JSON part");
    decode_result r;
    auto header = nlohmann::json::parse(frames[first + 1], nullptr, false);
    auto parent = nlohmann::json::parse(frames[first + 2], nullptr, false);
    if (header.is_discarded() || parent.is_discarded() || !is_json_object_text(frames[first + 3]) ||
        !is_json_object_text(frames[first + 4])) {
        // A part that is valid JSON but not an object is a schema error.
        const bool json_ok =
            !header.is_discarded() && !parent.is_discarded() &&
            nlohmann::json::accept(frames[first + 3]) && nlohmann::json::accept(frames[first + 4]);
        return fail(json_ok ? decode_error::bad_schema : decode_error::bad_json,
                    "in header, parent_header, metadata or content");
    }
    if (!header.is_object() || !parent.is_object())
        return fail(decode_error::bad_schema, "header or parent_header is not an object");
    if (!string_field(header, "msg_id", &r.fields.msg_id) ||
        !string_field(header, "msg_type", &r.fields.msg_type) ||
        !string_field(header, "session", &r.fields.session) ||
        !string_field(header, "username", nullptr) || !string_field(header, "version", nullptr) ||
        r.fields.msg_type.empty())
        return fail(decode_error::bad_schema,
                    "header needs string msg_id, msg_type, session, username, version");
    if (!parent.empty() && !string_field(parent, "msg_id", &r.fields.parent_msg_id))
        return fail(decode_error::bad_schema, "parent_header without a string msg_id");

    r.msg.identities.assign(std::make_move_iterator(frames.begin()),
                            std::make_move_iterator(delim));
    r.msg.header = std::move(frames[first + 1]);
    r.msg.parent_header = std::move(frames[first + 2]);
    r.msg.metadata = std::move(frames[first + 3]);
    r.msg.content = std::move(frames[first + 4]);
    r.msg.buffers.assign(std::make_move_iterator(frames.begin() + static_cast<long>(first + 5)),
                         std::make_move_iterator(frames.end()));
    return r;
}

std::vector<std::string> encode(const message& msg, const hmac_signer& signer) {
    std::vector<std::string> frames;
    frames.reserve(msg.identities.size() + 6 + msg.buffers.size());
    frames.insert(frames.end(), msg.identities.begin(), msg.identities.end());
    frames.emplace_back(delimiter);
    frames.push_back(signer.sign(msg.header, msg.parent_header, msg.metadata, msg.content));
    frames.push_back(msg.header);
    frames.push_back(msg.parent_header);
    frames.push_back(msg.metadata);
    frames.push_back(msg.content);
    frames.insert(frames.end(), msg.buffers.begin(), msg.buffers.end());
    return frames;
}

}  // namespace cellgate::protocol
