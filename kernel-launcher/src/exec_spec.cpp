// exec_spec: validation, the closed signal set and the strict JSON form.
#include "cellgate/launcher/exec_spec.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include <array>
#include <csignal>
#include <limits>
#include <utility>

namespace cellgate::launcher {

using nlohmann::json;

namespace {

constexpr std::array<std::pair<std::string_view, int>, 7> exec_signals = {{
    {"SIGINT", SIGINT},
    {"SIGTERM", SIGTERM},
    {"SIGKILL", SIGKILL},
    {"SIGHUP", SIGHUP},
    {"SIGQUIT", SIGQUIT},
    {"SIGUSR1", SIGUSR1},
    {"SIGUSR2", SIGUSR2},
}};

// For messages: a name or argument cut short, with NUL and control bytes shown.
std::string shown(std::string_view s) {
    std::string out;
    for (const char c : s.substr(0, 64)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
    return s.size() > 64 ? out + "…" : out;
}

void check_argv(const std::vector<std::string>& argv) {
    if (argv.empty() || argv.front().empty()) throw spec_error("argv must name a program (argv[0] is empty)");
    if (argv.size() > max_exec_args)
        throw spec_error("argv has " + std::to_string(argv.size()) + " arguments (at most " +
                         std::to_string(max_exec_args) + ")");
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < argv.size(); ++i) {
        if (argv[i].find('\0') != std::string::npos)
            throw spec_error("argv[" + std::to_string(i) + "] holds a NUL byte");
        bytes += argv[i].size() + 1;
    }
    if (bytes > max_exec_argv_bytes) throw spec_error("argv is larger than 64 KiB");
}

void check_cwd(const std::string& cwd) {
    if (cwd.empty() || cwd.front() != '/') throw spec_error("cwd must be an absolute path inside the sandbox");
    if (cwd.size() > max_exec_cwd_bytes) throw spec_error("cwd is longer than 4096 bytes");
    if (cwd.find('\0') != std::string::npos) throw spec_error("cwd holds a NUL byte");
    for (std::size_t start = 0; start <= cwd.size();) {
        const auto end = std::min(cwd.find('/', start), cwd.size());
        if (cwd.compare(start, end - start, "..") == 0) throw spec_error("cwd must not have a '..' component");
        start = end + 1;
    }
}

void check_env(const std::map<std::string, std::string>& env) {
    if (env.size() > max_exec_env_count)
        throw spec_error("too many environment variables (at most " + std::to_string(max_exec_env_count) + ")");
    std::size_t bytes = 0;
    for (const auto& [name, value] : env) {
        if (const auto why = exec_env_name_refused(name)) throw spec_error(*why);
        if (value.size() > max_exec_env_value_bytes)
            throw spec_error("environment variable '" + shown(name) + "' has a value over 32 KiB");
        if (value.find('\0') != std::string::npos)
            throw spec_error("environment variable '" + shown(name) + "' has a value holding a NUL byte");
        bytes += name.size() + value.size() + 2;
    }
    if (bytes > max_exec_env_bytes) throw spec_error("environment is larger than 256 KiB");
}

template <typename T>
void read_number(const json& j, const char* key, T& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > std::numeric_limits<T>::max())
        throw spec_error(std::string("'") + key + "' must be a small non-negative integer");
    out = static_cast<T>(it->get<std::uint64_t>());
}

void read_bool(const json& j, const char* key, bool& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_boolean()) throw spec_error(std::string("'") + key + "' must be true or false");
    out = it->get<bool>();
}

}  // namespace

std::optional<std::string> exec_env_name_refused(std::string_view name) {
    if (name.empty()) return "an environment variable needs a name";
    if (name.find('=') != std::string_view::npos)
        return "environment variable name '" + shown(name) + "' holds '='";
    if (name.find('\0') != std::string_view::npos)
        return "environment variable name '" + shown(name) + "' holds a NUL byte";
    if (name.starts_with("CELLGATE_"))
        return "environment variable '" + shown(name) + "' is reserved (CELLGATE_* configure the sandbox's own helpers)";
    return std::nullopt;
}

void validate_exec_spec(const exec_spec& spec) {
    check_argv(spec.argv);
    check_cwd(spec.cwd);
    check_env(spec.env);
    for (const auto side : {spec.rows, spec.cols})
        if (side < 1 || side > max_exec_tty_side) throw spec_error("rows and cols must be 1…1000");
}

bool is_exec_signal(int signal) noexcept { return !exec_signal_name(signal).empty(); }

std::optional<int> exec_signal_from_name(std::string_view name) noexcept {
    for (const auto& [n, s] : exec_signals)
        if (n == name) return s;
    return std::nullopt;
}

std::string_view exec_signal_name(int signal) noexcept {
    for (const auto& [n, s] : exec_signals)
        if (s == signal) return n;
    return {};
}

void to_json(json& j, const exec_spec& s) {
    j = json{{"argv", s.argv}, {"cwd", s.cwd}, {"env", s.env},    {"tty", s.tty},
             {"rows", s.rows}, {"cols", s.cols}, {"stdin", s.stdin_}};
}

void from_json(const json& j, exec_spec& s) {
    if (!j.is_object()) throw spec_error("an exec process must be a JSON object");
    for (const auto& [key, value] : j.items())
        if (key != "argv" && key != "cwd" && key != "env" && key != "tty" && key != "rows" && key != "cols" &&
            key != "stdin")
            throw spec_error("unknown field '" + shown(key) + "' in exec process");
    if (const auto it = j.find("argv"); it != j.end()) {
        if (!it->is_array() || it->size() > max_exec_args) throw spec_error("'argv' must be an array of strings");
        s.argv.clear();
        for (const auto& a : *it) {
            if (!a.is_string()) throw spec_error("'argv' must be an array of strings");
            s.argv.push_back(a.get<std::string>());
        }
    }
    if (const auto it = j.find("cwd"); it != j.end()) {
        if (!it->is_string()) throw spec_error("'cwd' must be a string");
        s.cwd = it->get<std::string>();
    }
    if (const auto it = j.find("env"); it != j.end()) {
        if (!it->is_object() || it->size() > max_exec_env_count)
            throw spec_error("'env' must be an object of strings");
        s.env.clear();
        for (const auto& [k, v] : it->items()) {
            if (!v.is_string()) throw spec_error("env value of '" + shown(k) + "' must be a string");
            s.env[k] = v.get<std::string>();
        }
    }
    read_bool(j, "tty", s.tty);
    read_number(j, "rows", s.rows);
    read_number(j, "cols", s.cols);
    read_bool(j, "stdin", s.stdin_);
}

}  // namespace cellgate::launcher
