#pragma once

// What a terminal's WebSocket client sends, as terminado frames it: a JSON
// array whose first member names the message — ["stdin", text] and
// ["set_size", rows, cols, …]. Pure (fuzzed: fuzz/terminado_fuzzer.cpp);
// anything else is not a message and is ignored, as terminado does.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate::jupyter {

struct terminado_message {
    enum class kind { stdin_, set_size } what = kind::stdin_;
    std::string text;                // stdin_
    std::uint16_t rows = 0, cols = 0;  // set_size: 1…1000 each
};

inline constexpr std::size_t max_terminado_depth = 4;  // the arrays are flat

std::optional<terminado_message> read_terminado(std::string_view frame);

}  // namespace cellgate::jupyter
