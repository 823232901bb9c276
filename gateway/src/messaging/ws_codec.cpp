#include "messaging/ws_codec.hpp"

#include "cellgate/protocol/json_check.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <utility>

namespace cellgate::messaging {

namespace {

using json = nlohmann::json;

// nlohmann parses and destroys iteratively, but dump() recurses, so a hostile
// "[[[[…" of a few megabytes would overflow the stack when the legacy protocol
// re-serialises a part. Python's json (the kernel's) gives up near 1000 levels.
constexpr std::size_t max_json_depth = 512;

// A channel name is echoed in an error only when it is short, printable ASCII,
// so the error stays safe to put in a JSON reply.
constexpr std::size_t max_echoed_name = 32;

constexpr std::size_t legacy_word = 4;  // u32be in the legacy binary framing
constexpr std::size_t v1_word = 8;      // u64le in the v1 framing
constexpr std::uint64_t v1_fixed_offsets = 6;  // channel + 4 JSON parts + end

decode_result fail(std::string error) {
    decode_result r;
    r.error = std::move(error);
    return r;
}

std::uint32_t read_u32be(std::string_view bytes, std::size_t pos) noexcept {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < legacy_word; ++i)
        v = (v << 8) | static_cast<unsigned char>(bytes[pos + i]);
    return v;
}

std::uint64_t read_u64le(std::string_view bytes, std::size_t pos) noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = v1_word; i-- > 0;)
        v = (v << 8) | static_cast<unsigned char>(bytes[pos + i]);
    return v;
}

void append_u32be(std::string& out, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
        out.push_back(static_cast<char>((v >> shift) & 0xffu));
}

void append_u64le(std::string& out, std::uint64_t v) {
    for (std::size_t i = 0; i < v1_word; ++i) {
        out.push_back(static_cast<char>(v & 0xffu));
        v >>= 8;
    }
}

std::string quoted_name(std::string_view name) {
    if (name.size() > max_echoed_name) return {};
    for (const char c : name)
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return {};
    return " \"" + std::string(name) + "\"";
}

// Resolves a channel a client may send on, or explains why not.
std::optional<channel> client_channel(std::string_view name, std::string* error) {
    const auto c = channel_from(name);
    if (!c) {
        *error = "unknown channel" + quoted_name(name);
        return std::nullopt;
    }
    if (*c == channel::iopub) {
        *error = "clients cannot send on iopub";
        return std::nullopt;
    }
    return c;
}

// Bracket depth outside strings. Exact for valid JSON; on invalid JSON it may
// be off, which does not matter because the parser rejects that text anyway.
// nlohmann's lexer takes a NUL byte for the end of input, so "{}\0junk" would
// pass; a JSON text can never hold a raw NUL, so refuse it before parsing.
bool parsable(std::string_view text) noexcept { return text.find('\0') == std::string_view::npos; }

// json::accept alone would take any JSON value; the parts must be objects.
bool starts_like_object(std::string_view text) noexcept {
    const auto first = text.find_first_not_of(" \t\r\n");
    return first != std::string_view::npos && text[first] == '{' && parsable(text);
}

bool is_json_object_text(std::string_view text) {
    return starts_like_object(text) && protocol::is_valid_json(text, {.require_object = true});
}

// Compact form; `replace` only so that dump() can never throw (the parser has
// already rejected invalid UTF-8). Keys come out sorted: ordered_json would
// keep their order but looks keys up linearly, quadratic on a hostile object.
std::string compact(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Reads msg_id and msg_type from a parsed header.
bool read_header_fields(const json& header, client_message& msg, std::string* error) {
    if (!header.is_object()) {
        *error = "header is not a JSON object";
        return false;
    }
    const auto id = header.find("msg_id");
    const auto type = header.find("msg_type");
    if (id == header.end() || !id->is_string()) {
        *error = "header has no string msg_id";
        return false;
    }
    if (type == header.end() || !type->is_string()) {
        *error = "header has no string msg_type";
        return false;
    }
    if (type->get_ref<const std::string&>().empty()) {
        *error = "header has an empty msg_type";
        return false;
    }
    msg.msg_id = id->get<std::string>();
    msg.msg_type = type->get<std::string>();
    return true;
}

// One of parent_header, metadata, content of a legacy message: an object,
// "{}" when absent.
bool optional_object_part(const json& root, const char* key, std::string* out,
                          std::string* error) {
    const auto it = root.find(key);
    if (it == root.end()) {
        *out = "{}";
        return true;
    }
    if (!it->is_object()) {
        *error = std::string(key) + " is not a JSON object";
        return false;
    }
    *out = compact(*it);
    return true;
}

// The legacy protocol's JSON message, from a text frame or part 0 of a binary
// frame (whose caller adds the buffers once the message is known to be good).
decode_result decode_legacy_json(std::string_view text, bool from_binary_frame) {
    if (!parsable(text)) return fail("message is not valid JSON");
    if (!protocol::json_nesting_within(text, max_json_depth)) return fail("JSON nested too deeply");
    const auto root = json::parse(text.begin(), text.end(), nullptr, false);
    if (root.is_discarded()) return fail("message is not valid JSON");
    if (!root.is_object()) return fail("message is not a JSON object");

    decode_result r;
    client_message& msg = r.msg;

    // jupyter_server assumes shell when a legacy message names no channel.
    const auto chan = root.find("channel");
    if (chan == root.end()) {
        msg.chan = channel::shell;
    } else if (!chan->is_string()) {
        return fail("channel is not a string");
    } else {
        std::string error;
        const auto c = client_channel(chan->get_ref<const std::string&>(), &error);
        if (!c) return fail(std::move(error));
        msg.chan = *c;
    }

    const auto header = root.find("header");
    if (header == root.end()) return fail("message has no header");
    if (!read_header_fields(*header, msg, &r.error)) return r;
    msg.header = compact(*header);
    if (!optional_object_part(root, "parent_header", &msg.parent_header, &r.error) ||
        !optional_object_part(root, "metadata", &msg.metadata, &r.error) ||
        !optional_object_part(root, "content", &msg.content, &r.error))
        return r;

    // A text frame cannot carry bytes; JupyterLab still sends "buffers": [].
    // In a binary frame the binary parts are the buffers and the key is ignored.
    if (!from_binary_frame) {
        const auto bufs = root.find("buffers");
        if (bufs != root.end() && !(bufs->is_array() && bufs->empty()))
            return fail("buffers must be sent in a binary frame");
    }
    r.ok = true;
    return r;
}

std::string escaped_string(std::string_view s) { return compact(json(std::string(s))); }

std::size_t buffer_count(const outgoing_view& m) noexcept {
    return m.buffers == nullptr ? 0 : m.buffers->size();
}

// The legacy JSON message, spliced from the raw parts. Its size is known
// before it is written, so a binary frame's offset table can come first and
// every part is copied once, straight into the frame.
class legacy_json_writer {
public:
    // `buffers_key` only for a text frame: a binary frame carries its buffers
    // as binary parts.
    legacy_json_writer(const outgoing_view& m, bool buffers_key)
        : m_(m), id_(escaped_string(m.msg_id)), type_(escaped_string(m.msg_type)),
          buffers_key_(buffers_key) {}

    std::size_t size() const noexcept {
        return k_channel.size() + to_string(m_.chan).size() + k_header.size() + m_.header.size() +
               k_parent.size() + m_.parent_header.size() + k_metadata.size() +
               m_.metadata.size() + k_content.size() + m_.content.size() + k_msg_id.size() +
               id_.size() + k_msg_type.size() + type_.size() +
               (buffers_key_ ? k_buffers.size() : 0) + 1;
    }

    void append_to(std::string& out) const {
        out.append(k_channel).append(to_string(m_.chan)).append(k_header).append(m_.header);
        out.append(k_parent).append(m_.parent_header);
        out.append(k_metadata).append(m_.metadata);
        out.append(k_content).append(m_.content);
        out.append(k_msg_id).append(id_);
        out.append(k_msg_type).append(type_);
        if (buffers_key_) out.append(k_buffers);
        out.push_back('}');
    }

private:
    static constexpr std::string_view k_channel = R"({"channel":")";
    static constexpr std::string_view k_header = R"(","header":)";
    static constexpr std::string_view k_parent = R"(,"parent_header":)";
    static constexpr std::string_view k_metadata = R"(,"metadata":)";
    static constexpr std::string_view k_content = R"(,"content":)";
    static constexpr std::string_view k_msg_id = R"(,"msg_id":)";
    static constexpr std::string_view k_msg_type = R"(,"msg_type":)";
    static constexpr std::string_view k_buffers = R"(,"buffers":[])";

    const outgoing_view& m_;
    std::string id_, type_;
    bool buffers_key_;
};

}  // namespace

std::optional<channel> channel_from(std::string_view name) noexcept {
    if (name == "shell") return channel::shell;
    if (name == "iopub") return channel::iopub;
    if (name == "stdin") return channel::stdin_;
    if (name == "control") return channel::control;
    return std::nullopt;
}

std::string_view to_string(channel c) noexcept {
    switch (c) {
    case channel::shell: return "shell";
    case channel::iopub: return "iopub";
    case channel::stdin_: return "stdin";
    case channel::control: return "control";
    }
    return "shell";
}

decode_result decode_json_text(std::string_view text, const codec_limits& limits) {
    if (text.size() > limits.max_frame_bytes) return fail("frame too large");
    return decode_legacy_json(text, false);
}

decode_result decode_json_binary(std::string_view frame, const codec_limits& limits) {
    // Size and count, then the whole offset table, before any JSON.
    if (frame.size() > limits.max_frame_bytes) return fail("frame too large");
    if (frame.size() < legacy_word) return fail("frame too short for its offset table");
    const std::size_t nbufs = read_u32be(frame, 0);
    if (nbufs < 1) return fail("frame declares no parts");
    if (nbufs - 1 > limits.max_buffers) return fail("too many buffers");
    // nbufs < 2^32, so this cannot overflow a 64-bit size_t.
    const std::size_t table_bytes = legacy_word * (nbufs + 1);
    if (frame.size() < table_bytes) return fail("frame too short for its offset table");

    std::vector<std::size_t> offsets(nbufs + 1);
    for (std::size_t i = 0; i < nbufs; ++i) offsets[i] = read_u32be(frame, legacy_word * (i + 1));
    offsets[nbufs] = frame.size();
    if (offsets[0] != table_bytes) return fail("first offset does not follow the offset table");
    for (std::size_t i = 0; i < nbufs; ++i)
        if (offsets[i + 1] < offsets[i]) return fail("offsets out of order or past the end");

    auto r = decode_legacy_json(frame.substr(offsets[0], offsets[1] - offsets[0]), true);
    if (!r.ok) return r;
    r.msg.buffers.reserve(nbufs - 1);
    for (std::size_t i = 1; i < nbufs; ++i)
        r.msg.buffers.emplace_back(frame.substr(offsets[i], offsets[i + 1] - offsets[i]));
    return r;
}

decode_result decode_v1(std::string_view frame, const codec_limits& limits) {
    // Size and count, then the whole offset table, before any JSON.
    if (frame.size() > limits.max_frame_bytes) return fail("frame too large");
    if (frame.size() < v1_word) return fail("frame too short for its offset table");
    const std::uint64_t offset_number = read_u64le(frame, 0);
    if (offset_number < v1_fixed_offsets) return fail("frame declares too few offsets");
    if (offset_number - v1_fixed_offsets > limits.max_buffers) return fail("too many buffers");
    // Compared by division so that a hostile offset_number cannot overflow
    // 8*(1+offset_number): the table fits iff offset_number + 1 <= size / 8.
    if (offset_number >= frame.size() / v1_word)
        return fail("frame too short for its offset table");
    const auto n = static_cast<std::size_t>(offset_number);
    const std::size_t table_bytes = v1_word * (1 + n);

    std::vector<std::size_t> offsets(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t o = read_u64le(frame, v1_word * (i + 1));
        if (o > frame.size()) return fail("offset past the end of the frame");
        offsets[i] = static_cast<std::size_t>(o);
    }
    if (offsets[0] != table_bytes) return fail("first offset does not follow the offset table");
    for (std::size_t i = 1; i < n; ++i)
        if (offsets[i] < offsets[i - 1]) return fail("offsets out of order");
    const auto part = [&](std::size_t i) {
        return frame.substr(offsets[i], offsets[i + 1] - offsets[i]);
    };

    decode_result r;
    client_message& msg = r.msg;
    const auto chan = client_channel(part(0), &r.error);
    if (!chan) return r;
    msg.chan = *chan;

    // The parts are kept byte for byte; only the header is parsed, for routing.
    const std::string_view header = part(1);
    if (!starts_like_object(header)) return fail("header is not a JSON object");
    const auto parsed = json::parse(header.begin(), header.end(), nullptr, false);
    if (parsed.is_discarded()) return fail("header is not valid JSON");
    if (!read_header_fields(parsed, msg, &r.error)) return r;
    if (!is_json_object_text(part(2))) return fail("parent_header is not a JSON object");
    if (!is_json_object_text(part(3))) return fail("metadata is not a JSON object");
    if (!is_json_object_text(part(4))) return fail("content is not a JSON object");

    msg.header = std::string(header);
    msg.parent_header = std::string(part(2));
    msg.metadata = std::string(part(3));
    msg.content = std::string(part(4));
    msg.buffers.reserve(n - v1_fixed_offsets);
    for (std::size_t i = 5; i + 1 < n; ++i) msg.buffers.emplace_back(part(i));
    r.ok = true;
    return r;
}

encoded_frame encode_json(const outgoing_view& m) {
    encoded_frame f;
    const std::size_t nbuf = buffer_count(m);
    if (nbuf == 0) {
        const legacy_json_writer text(m, true);
        f.bytes.reserve(text.size());
        text.append_to(f.bytes);
        return f;
    }

    const legacy_json_writer head(m, false);
    const std::size_t head_size = head.size();
    const std::size_t nbufs = 1 + nbuf;
    const std::size_t table_bytes = legacy_word * (nbufs + 1);
    std::size_t total = table_bytes + head_size;
    for (const auto& b : *m.buffers) total += b.size();
    // u32 offsets cannot address past 4 GiB; the wire decoder caps a kernel's
    // message far below that, so this is a guard, not a path: an empty frame
    // rather than a corrupt one.
    if (total - m.buffers->back().size() > std::numeric_limits<std::uint32_t>::max()) return f;

    f.binary = true;
    f.bytes.reserve(total);
    append_u32be(f.bytes, static_cast<std::uint32_t>(nbufs));
    std::size_t offset = table_bytes;
    append_u32be(f.bytes, static_cast<std::uint32_t>(offset));
    offset += head_size;
    for (std::size_t i = 0; i + 1 < nbuf; ++i) {
        append_u32be(f.bytes, static_cast<std::uint32_t>(offset));
        offset += (*m.buffers)[i].size();
    }
    append_u32be(f.bytes, static_cast<std::uint32_t>(offset));
    head.append_to(f.bytes);
    for (const auto& b : *m.buffers) f.bytes.append(b);
    return f;
}

std::string encode_v1(const outgoing_view& m) {
    const std::string_view chan = to_string(m.chan);
    const std::size_t nbuf = buffer_count(m);
    const std::size_t n = v1_fixed_offsets + nbuf;
    const std::size_t table_bytes = v1_word * (1 + n);

    std::size_t total = table_bytes + chan.size() + m.header.size() + m.parent_header.size() +
                        m.metadata.size() + m.content.size();
    for (std::size_t i = 0; i < nbuf; ++i) total += (*m.buffers)[i].size();

    std::string out;
    out.reserve(total);
    append_u64le(out, n);
    std::size_t offset = table_bytes;
    const auto mark = [&](std::size_t part_size) {
        append_u64le(out, offset);
        offset += part_size;
    };
    mark(chan.size());
    mark(m.header.size());
    mark(m.parent_header.size());
    mark(m.metadata.size());
    mark(m.content.size());
    for (std::size_t i = 0; i < nbuf; ++i) mark((*m.buffers)[i].size());
    append_u64le(out, offset);  // the end of the frame

    out.append(chan).append(m.header).append(m.parent_header).append(m.metadata).append(m.content);
    for (std::size_t i = 0; i < nbuf; ++i) out.append((*m.buffers)[i]);
    return out;
}

}  // namespace cellgate::messaging
