// libFuzzer target: a multipart/form-data body (util/multipart.hpp) as the
// /v1 files upload and the session create with an archive read it, and the
// Content-Type's boundary. The first line of the input is the Content-Type,
// the rest the body. Beyond "no crash": every part's data lies inside the
// body, no more parts than asked for, and a boundary is never empty.

#include "util/multipart.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace cellgate;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const auto nl = input.find('\n');
    const auto content_type = input.substr(0, nl == std::string_view::npos ? input.size() : nl);
    const auto body = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);
    const auto boundary = multipart_boundary(content_type);
    if (!boundary) return 0;
    if (boundary->empty() || boundary->size() > 200) __builtin_trap();
    const auto parts = parse_multipart(body, *boundary, 16);
    if (!parts) return 0;
    if (parts->size() > 16) __builtin_trap();
    for (const auto& p : *parts) {
        if (!p.data.empty() && (p.data.data() < body.data() || p.data.data() + p.data.size() > body.data() + body.size()))
            __builtin_trap();
    }
    return 0;
}
