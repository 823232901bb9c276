#pragma once

// The gateway's options, in one table: the names the command line
// (--kebab-case) and the config file (snake_case keys) take, what each
// means and defaults to, and how it is applied. parse_config looks options
// up here; usage() and configuration_reference() are printed from it, so
// --help, docs/configuration.md and the code cannot disagree.

#include "config/gateway_config.hpp"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::config {

enum class option_kind {
    value,         // --name VALUE, or "name": value in the config file; has a setter
    command_line,  // handled by parse_config itself (--config FILE, --check-config, --help, …)
    file_only,     // a config file key with a structured value (tokens, kernelspecs, …)
};

using setter = std::function<void(gateway_config&, const std::string&)>;

// The table leaves out what an entry does not need (designated initializers).
struct option {
    std::string_view name{};     // snake_case: the config file's key; --kebab-case on the command line
    std::string_view section{};  // one of sections()
    option_kind kind = option_kind::value;
    std::string_view value{};     // what it takes: N, BYTES, S, PATH, on|off, …; "" for a bare flag
    std::string_view fallback{};  // its default as a reader needs to see it (Markdown); "—": nothing to tell (flags)
    std::string_view help{};      // one paragraph of Markdown; the first sentence is --help's line
    // A value the option accepts (value options), or a whole config file
    // showing the key (file-only keys). The reference prints the latter; the
    // unit test parses both.
    std::string_view sample{};
    setter set{};  // value options only
};

struct section {
    std::string_view name{};
    std::string_view intro{};  // Markdown, may be empty
};

// In the order the reference and --help list them.
const std::vector<section>& sections();
// Every option: the command line's and the config file's (command_line_options(),
// then file_only_options()).
const std::vector<option>& options();

// The option of that snake_case name, or null.
const option* find_option(std::string_view name);

// "max_kernels" → "--max-kernels".
std::string command_line_name(std::string_view name);

// The table's parts: options given on the command line or as a config file's
// scalar (option_table.cpp), and the config file's structured keys
// (file_entries.cpp).
std::vector<option> command_line_options();
std::vector<option> file_only_options();

// The sections' names, for the table's entries.
namespace heading {
inline constexpr std::string_view running = "Running cellgate";
inline constexpr std::string_view listening = "Listening and auth";
inline constexpr std::string_view state = "State and sandboxes";
inline constexpr std::string_view node = "Sandboxes on this node";
inline constexpr std::string_view admission = "Admission and quotas";
inline constexpr std::string_view kernels = "Kernels";
inline constexpr std::string_view pool = "Warm pool";
inline constexpr std::string_view jupyter_limits = "Limits (Jupyter surface)";
inline constexpr std::string_view agent_limits = "Limits (/v1 surface)";
inline constexpr std::string_view egress = "Egress";
inline constexpr std::string_view cluster = "Cluster";
inline constexpr std::string_view connections = "Protocol and connections";
inline constexpr std::string_view threads = "Threads and logging";
inline constexpr std::string_view surfaces = "Surfaces";
inline constexpr std::string_view file_only = "The config file only";
}  // namespace heading

}  // namespace cellgate::config
