#include "cellgate/protocol/wire_codec.hpp"

#include "cellgate/protocol/json_check.hpp"

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

bool is_json_object_text(std::string_view text) { return is_valid_json(text, {.require_object = true}); }

// Validates a JSON text and reads the top-level string members routing needs,
// without building a document (this runs for every message a kernel sends).
class top_level_fields : public nlohmann::json_sax<nlohmann::json> {
public:
    struct field {
        const char* name;
        bool present = false;
        std::string value;
    };
    explicit top_level_fields(std::initializer_list<const char*> names) {
        for (const auto* n : names) fields_.push_back({n, false, {}});
    }
    bool parse(const std::string& text) {
        ok_ = nlohmann::json::sax_parse(text, this, nlohmann::json::input_format_t::json, true);
        return ok_;
    }
    bool root_is_object() const noexcept { return root_object_; }
    std::size_t members() const noexcept { return members_; }
    const field* find(std::string_view name) const {
        for (const auto& f : fields_)
            if (name == f.name) return &f;
        return nullptr;
    }

    bool null() override { return value(); }
    bool boolean(bool) override { return value(); }
    bool number_integer(number_integer_t) override { return value(); }
    bool number_unsigned(number_unsigned_t) override { return value(); }
    bool number_float(number_float_t, const string_t&) override { return value(); }
    bool binary(binary_t&) override { return value(); }
    bool string(string_t& v) override {
        if (depth_ == 1 && current_ != nullptr) {
            current_->present = true;
            current_->value = std::move(v);
        }
        return value();
    }
    bool start_object(std::size_t) override {
        if (depth_ == 0) root_object_ = true;
        value();
        ++depth_;
        return true;
    }
    bool key(string_t& k) override {
        if (depth_ == 1) {
            ++members_;
            current_ = nullptr;
            for (auto& f : fields_)
                if (k == f.name && !f.present) current_ = &f;
        }
        return true;
    }
    bool end_object() override {
        --depth_;
        return true;
    }
    bool start_array(std::size_t) override {
        value();
        ++depth_;
        return true;
    }
    bool end_array() override {
        --depth_;
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

private:
    // Any value at depth 1 ends the current key's chance to be a wanted string.
    bool value() {
        if (depth_ == 1) current_ = nullptr;
        return true;
    }
    std::vector<field> fields_;
    field* current_ = nullptr;
    int depth_ = 0;
    bool root_object_ = false;
    bool ok_ = false;
    std::size_t members_ = 0;
};

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
    top_level_fields header({"msg_id", "msg_type", "session", "username", "version"});
    top_level_fields parent({"msg_id"});
    const bool header_ok = header.parse(frames[first + 1]);
    const bool parent_ok = parent.parse(frames[first + 2]);
    if (!header_ok || !parent_ok || !is_json_object_text(frames[first + 3]) || !is_json_object_text(frames[first + 4])) {
        // A part that is valid JSON but not an object is a schema error.
        const bool json_ok = header_ok && parent_ok && is_valid_json(frames[first + 3]) &&
                             is_valid_json(frames[first + 4]);
        return fail(json_ok ? decode_error::bad_schema : decode_error::bad_json,
                    "in header, parent_header, metadata or content");
    }
    if (!header.root_is_object() || !parent.root_is_object())
        return fail(decode_error::bad_schema, "header or parent_header is not an object");
    const auto* msg_id = header.find("msg_id");
    const auto* msg_type = header.find("msg_type");
    const auto* session = header.find("session");
    if (!msg_id->present || !msg_type->present || !session->present || !header.find("username")->present ||
        !header.find("version")->present || msg_type->value.empty())
        return fail(decode_error::bad_schema,
                    "header needs string msg_id, msg_type, session, username, version");
    r.fields.msg_id = msg_id->value;
    r.fields.msg_type = msg_type->value;
    r.fields.session = session->value;
    if (parent.members() > 0) {
        const auto* parent_id = parent.find("msg_id");
        if (!parent_id->present) return fail(decode_error::bad_schema, "parent_header without a string msg_id");
        r.fields.parent_msg_id = parent_id->value;
    }

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
