// libFuzzer target: what a terminal's WebSocket client sends (terminado's
// frames, jupyter/terminado.hpp). Beyond "no crash": nothing nested past the
// bound is read, a size is always within 1…1000, and reading is a pure
// function of the bytes.

#include "jupyter/terminado.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

using namespace cellgate::jupyter;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view frame(reinterpret_cast<const char*>(data), size);
    const auto m = read_terminado(frame);
    if (!m) return 0;
    if (m->what == terminado_message::kind::set_size &&
        (m->rows < 1 || m->rows > 1000 || m->cols < 1 || m->cols > 1000))
        __builtin_trap();
    if (m->what == terminado_message::kind::stdin_ && m->text.size() > size) __builtin_trap();
    const auto again = read_terminado(frame);
    if (!again || again->what != m->what || again->text != m->text || again->rows != m->rows) __builtin_trap();
    return 0;
}
