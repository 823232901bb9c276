// libFuzzer target: the ZMQ multipart codec that reads what a (hostile) kernel
// sends. The input is split into frames:
//   byte 0            frame count (mod 17)
//   per frame         u16 big-endian length, then that many bytes (cut short
//                     at the end of the input)
// Those frames are decoded twice: as they are (the fuzzer rarely forges an
// HMAC, so this mostly exercises the checks before the signature), and as the
// four JSON parts plus buffers of a message that is signed here with the
// fixed key, so that the parse and schema checks see fuzzed input too.

#include "cellgate/protocol/hmac_signer.hpp"
#include "cellgate/protocol/wire_codec.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace cellgate::protocol;

constexpr std::string_view fuzz_key = "cellgate-fuzz-key-0123456789abcdef";
constexpr std::size_t max_frame_count = 16;

std::vector<std::string> split_frames(const std::uint8_t* data, std::size_t size) {
    std::vector<std::string> frames;
    if (size == 0) return frames;
    const std::size_t count = data[0] % (max_frame_count + 1);
    std::size_t pos = 1;
    for (std::size_t i = 0; i < count && pos < size; ++i) {
        std::size_t len = size - pos;
        if (len >= 2) {
            len = (static_cast<std::size_t>(data[pos]) << 8) | data[pos + 1];
            pos += 2;
            len = std::min(len, size - pos);
        } else {
            pos = size;
            len = 0;
        }
        frames.emplace_back(reinterpret_cast<const char*>(data + pos), len);
        pos += len;
    }
    return frames;
}

void check(const decode_result& r, const hmac_signer& signer) {
    if (!r) return;
    if (r.fields.msg_type.empty()) __builtin_trap();
    // A decoded message re-encodes to frames that decode to the same message.
    auto again = decode(encode(r.msg, signer), signer);
    if (!again || again.msg.header != r.msg.header ||
        again.msg.parent_header != r.msg.parent_header || again.msg.metadata != r.msg.metadata ||
        again.msg.content != r.msg.content || again.msg.buffers != r.msg.buffers ||
        again.msg.identities != r.msg.identities || again.fields.msg_id != r.fields.msg_id ||
        again.fields.parent_msg_id != r.fields.parent_msg_id)
        __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const hmac_signer signer(fuzz_key);
    auto frames = split_frames(data, size);

    // As a kernel would send them.
    check(decode(std::vector<std::string>(frames), signer), signer);

    // As the parts of a correctly signed message.
    while (frames.size() < 4) frames.emplace_back("{}");
    std::vector<std::string> wire;
    wire.reserve(frames.size() + 3);
    wire.emplace_back("kernel-identity");
    wire.emplace_back(delimiter);
    wire.push_back(signer.sign(frames[0], frames[1], frames[2], frames[3]));
    for (auto& f : frames) wire.push_back(std::move(f));
    check(decode(std::move(wire), signer), signer);
    return 0;
}
