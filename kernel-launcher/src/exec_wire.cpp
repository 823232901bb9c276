#include "exec_wire.hpp"

#include "cellgate/launcher/exec_spec.hpp"

#include <nlohmann/json.hpp>

namespace cellgate::launcher {

using nlohmann::json;

std::string signal_line(int sig) { return json{{"signal", exec_signal_name(sig)}}.dump() + "\n"; }

std::optional<int> parse_signal_line(std::string_view line) {
    if (line.size() > max_signal_line_bytes) return std::nullopt;
    const auto j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.size() != 1) return std::nullopt;
    const auto it = j.find("signal");
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return exec_signal_from_name(it->get<std::string>());
}

std::string exit_line(const exec_exit& e) {
    return json{{"exit", {{"code", e.code}, {"signal", e.signal}}}}.dump() + "\n";
}

std::optional<exec_exit> parse_exit_line(std::string_view line) {
    if (line.size() > max_exit_line_bytes) return std::nullopt;
    const auto j = json::parse(line, nullptr, false);
    if (!j.is_object() || j.size() != 1) return std::nullopt;
    const auto it = j.find("exit");
    if (it == j.end() || !it->is_object() || it->size() != 2) return std::nullopt;
    const auto code = it->find("code"), signal = it->find("signal");
    if (code == it->end() || signal == it->end() || !code->is_number_integer() || !signal->is_number_integer())
        return std::nullopt;
    const auto c = code->get<std::int64_t>(), s = signal->get<std::int64_t>();
    if (c < -1 || c > 255 || s < 0 || s > 64) return std::nullopt;
    return exec_exit{static_cast<int>(c), static_cast<int>(s)};
}

bool line_buffer::append(std::string_view bytes) {
    data_.append(bytes);
    // Every complete line is within the limit, and so is the partial one.
    std::size_t start = 0;
    for (auto nl = data_.find('\n'); nl != std::string::npos; nl = data_.find('\n', start)) {
        if (nl - start > max_) return false;
        start = nl + 1;
    }
    return data_.size() - start <= max_;
}

std::optional<std::string> line_buffer::pop() {
    const auto nl = data_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string line = data_.substr(0, nl);
    data_.erase(0, nl + 1);
    return line;
}

}  // namespace cellgate::launcher
