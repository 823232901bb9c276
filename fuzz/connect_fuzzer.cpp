// libFuzzer target: E2B's Connect framing as envd's streaming requests carry
// it (e2b/connect_rpc.hpp): one envelope, a flag byte, a 4-byte length and
// a JSON message. Beyond "no crash": what is accepted is a JSON object whose
// envelope, written back, is the body itself when the message was written
// the way we write it; a compressed or mis-sized envelope is always refused.

#include "e2b/connect_rpc.hpp"
#include "util/api_error.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace cellgate::e2b;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    try {
        const auto m = connect::request_message(body);
        if (!m.is_object() || size < 5) __builtin_trap();
        if ((static_cast<unsigned char>(body[0]) & 0x01) != 0) __builtin_trap();
        // Our own writing of it reads back to the same message.
        const auto again = connect::request_message(connect::envelope(m));
        if (again != m) __builtin_trap();
    } catch (const cellgate::api_exception& e) {
        if (e.status() != 400) __builtin_trap();
    }
    // The end of a stream, with an error of any words, is one envelope with the end flag.
    const auto end = connect::end_stream(std::pair{std::string_view("internal"), std::string(body.substr(0, 256))});
    if (end.size() < 5 || static_cast<unsigned char>(end[0]) != connect::end_stream_flag) __builtin_trap();
    return 0;
}
