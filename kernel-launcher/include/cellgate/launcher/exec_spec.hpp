#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::launcher {

// A process to run inside an existing sandbox (sandbox_launcher::exec), with
// exactly the kernel's confinement: its uid, namespaces, cgroup, rlimits,
// no_new_privs, no capabilities and (under runc) its seccomp profile. Closed
// and plain, like sandbox_spec: it crosses the launcher service's socket as
// JSON unchanged ("stdin" there; `stdin_` here, since <cstdio> owns the name).
struct exec_spec {
    std::vector<std::string> argv;           // argv[0] is looked up in PATH inside the sandbox
    std::string cwd = "/workspace";          // absolute, inside the sandbox
    std::map<std::string, std::string> env;  // over the sandbox's base environment (PATH, HOME, LANG, …)
    bool tty = false;                        // one PTY master for input and output
    std::uint16_t rows = 24;                 // the PTY's size, 1…1000
    std::uint16_t cols = 80;
    bool stdin_ = false;                     // keep a stdin pipe (without a tty); else /dev/null
};

// The bounds validate_exec_spec applies.
inline constexpr std::size_t max_exec_args = 256;
inline constexpr std::size_t max_exec_argv_bytes = 64u << 10;
inline constexpr std::size_t max_exec_env_count = 256;
inline constexpr std::size_t max_exec_env_value_bytes = 32u << 10;
inline constexpr std::size_t max_exec_env_bytes = 256u << 10;
inline constexpr std::size_t max_exec_cwd_bytes = 4096;
inline constexpr std::uint16_t max_exec_tty_side = 1000;

// Throws spec_error naming the first thing wrong: argv empty, too long or
// holding a NUL; cwd not absolute, with a NUL or a ".." component; env over
// its bounds or naming a variable exec_env_name_refused() refuses; a PTY size
// outside 1…1000.
void validate_exec_spec(const exec_spec& spec);

// Why an environment name cannot be passed to an exec'd process, or nullopt
// when it can. Names are the client's own data and pass as they are, except
// the empty name, names holding '=' or NUL (no NAME=value can carry them), and
// the prefix CELLGATE_, which the launcher and its helpers inside a sandbox
// read their own settings from (CELLGATE_PRELOAD).
std::optional<std::string> exec_env_name_refused(std::string_view name);

// The signals a caller may send to an exec'd process: SIGINT, SIGTERM,
// SIGKILL, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2. Anything else (SIGSTOP, which
// would leave a caller's reads hanging; real-time signals) is refused.
bool is_exec_signal(int signal) noexcept;
// "SIGTERM" → SIGTERM for the signals above; nullopt for any other name.
std::optional<int> exec_signal_from_name(std::string_view name) noexcept;
// SIGTERM → "SIGTERM"; "" for a signal outside the set.
std::string_view exec_signal_name(int signal) noexcept;

// Strict JSON, as sandbox_spec's: unknown fields and wrong types are refused
// with a spec_error naming the field.
void to_json(nlohmann::json& j, const exec_spec& s);
void from_json(const nlohmann::json& j, exec_spec& s);

}  // namespace cellgate::launcher
