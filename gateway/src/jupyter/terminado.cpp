#include "jupyter/terminado.hpp"

#include "cellgate/protocol/json_check.hpp"

#include <nlohmann/json.hpp>

namespace cellgate::jupyter {

std::optional<terminado_message> read_terminado(std::string_view frame) {
    if (!protocol::json_nesting_within(frame, max_terminado_depth)) return std::nullopt;
    const auto m = nlohmann::json::parse(frame, nullptr, false);
    if (!m.is_array() || m.empty() || !m[0].is_string()) return std::nullopt;
    const auto& kind = m[0].get_ref<const std::string&>();
    if (kind == "stdin" && m.size() >= 2 && m[1].is_string()) {
        terminado_message out;
        out.text = m[1].get<std::string>();
        return out;
    }
    if (kind == "set_size" && m.size() >= 3 && m[1].is_number_integer() && m[2].is_number_integer()) {
        const auto rows = m[1].get<long long>(), cols = m[2].get<long long>();
        if (rows < 1 || rows > 1000 || cols < 1 || cols > 1000) return std::nullopt;
        terminado_message out;
        out.what = terminado_message::kind::set_size;
        out.rows = static_cast<std::uint16_t>(rows);
        out.cols = static_cast<std::uint16_t>(cols);
        return out;
    }
    return std::nullopt;
}

}  // namespace cellgate::jupyter
