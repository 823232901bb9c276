#include "cli_runtime.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "command.hpp"
#include "host_fs.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

constexpr auto runtime_timeout = std::chrono::seconds(60);

std::string signal_name(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
}

bool not_found(const std::string& output) {
    return output.find("does not exist") != std::string::npos || output.find("not found") != std::string::npos;
}

runtime_container parse(const nlohmann::json& j, const std::string& fallback_id) {
    runtime_container c;
    c.id = fallback_id;
    if (!j.is_object()) return c;
    c.id = j.value("id", fallback_id);
    c.status = j.value("status", std::string());
    c.pid = std::max<std::int64_t>(0, j.value("pid", std::int64_t{0}));  // runsc says -1 once stopped
    c.bundle = j.value("bundle", std::string());
    return c;
}

}  // namespace

void oci_runtime::checkpoint(const std::string&, const fs::path&) {
    throw launch_error("checkpoint", std::string(name()) + " cannot checkpoint a running sandbox", ENOTSUP);
}

std::int64_t oci_runtime::restore(const std::string&, const fs::path&, const fs::path&, const container_start&) {
    throw launch_error("runtime-run", std::string(name()) + " cannot restore a sandbox from a checkpoint", ENOTSUP);
}

std::vector<std::string> cli_runtime::argv(std::vector<std::string> args) const {
    std::vector<std::string> out = {program_, "--root", root_.string()};
    out.insert(out.end(), args.begin(), args.end());
    return out;
}

std::int64_t cli_runtime::run_detached(const std::string& id, const fs::path& bundle, const container_start& io,
                                       const std::vector<std::string>& flags, const fs::path& why_log,
                                       std::size_t why_bytes, const std::string& verb,
                                       const std::vector<std::string>& verb_flags) {
    const auto pid_file = bundle / "init.pid";
    std::vector<std::string> args = flags;
    for (const auto& a : {verb, std::string("--detach"), std::string("--bundle"), bundle.string(),
                          std::string("--pid-file"), pid_file.string()})
        args.push_back(a);
    args.insert(args.end(), verb_flags.begin(), verb_flags.end());
    args.push_back(id);
    command_fds fds;
    fds.stdin_fd = io.stdin_fd;
    fds.stdout_fd = io.stdout_fd;
    fds.stderr_fd = io.log_fd;
    // Within the start's deadline when it has one (at least a second, so a
    // start that reaches here late still gets a verdict from the runtime).
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(runtime_timeout);
    if (io.deadline) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*io.deadline - std::chrono::steady_clock::now());
        timeout = std::clamp(left, std::chrono::milliseconds(1000), timeout);
    }
    const auto r = run_command(argv(std::move(args)), timeout, fds);
    const std::string who(name());
    if (r.timed_out)
        throw launch_error("runtime-run", who + " " + verb + " did not finish within " +
                                              std::to_string(timeout.count() / 1000) + " s", ETIMEDOUT);
    if (r.exit_code != 0) {
        std::string why = read_tail(why_log, why_bytes);
        if (why_log != bundle / "kernel.log") why += read_tail(bundle / "kernel.log", why_bytes);
        throw launch_error("runtime-run", who + " " + verb + " exited " + std::to_string(r.exit_code) + ": " + why);
    }
    try {
        return std::stoll(read_file(pid_file, 32));
    } catch (...) {
        throw launch_error("runtime-run", who + " wrote no pid file", ENOENT);
    }
}

exec_command cli_runtime::detached_exec(const std::string& id, const exec_files& files,
                                        const std::vector<std::string>& flags,
                                        const std::vector<std::string>& exec_flags) const {
    exec_command c;
    c.pid_file = (files.dir / "exec.pid").string();
    c.log = (files.dir / "runtime.log").string();
    std::vector<std::string> args = flags;
    for (const auto& a : {std::string("--log"), c.log, std::string("exec"), std::string("--detach"),
                          std::string("--pid-file"), c.pid_file, std::string("--process"), files.process_json.string()})
        args.push_back(a);
    if (!files.console_socket.empty()) {
        args.push_back("--console-socket");
        args.push_back(files.console_socket.string());
    }
    args.insert(args.end(), exec_flags.begin(), exec_flags.end());
    args.push_back(id);
    c.start = argv(std::move(args));
    return c;
}

void cli_runtime::run_verb(const char* step, const std::vector<std::string>& args) {
    const auto r = run_command(argv(args), runtime_timeout);
    if (r.timed_out) throw launch_error(step, std::string(name()) + " " + step + " timed out", ETIMEDOUT);
    if (r.exit_code != 0) {
        // A Go panic says why in its first line, before a long stack.
        const auto panic = r.output.find("panic:");
        const auto from = panic != std::string::npos ? panic : 0;
        throw launch_error(step, std::string(name()) + " " + step + " exited " + std::to_string(r.exit_code) + ": " +
                                     r.output.substr(from, 1500));
    }
}

void cli_runtime::kill(const std::string& id, int signal, bool all_processes) {
    std::vector<std::string> args = {"kill"};
    if (all_processes) args.push_back("--all");
    args.push_back(id);
    args.push_back(signal_name(signal));
    const auto r = run_command(argv(args), runtime_timeout);
    if (r.exit_code != 0 && !not_found(r.output) && r.output.find("not running") == std::string::npos &&
        r.output.find("process already finished") == std::string::npos)
        throw launch_error("runtime-kill", std::string(name()) + " kill: " + r.output);
}

void cli_runtime::remove(const std::string& id) {
    const auto r = run_command(argv({"delete", "--force", id}), runtime_timeout);
    if (r.exit_code != 0 && !not_found(r.output))
        throw launch_error("runtime-delete", std::string(name()) + " delete: " + r.output);
}

runtime_container cli_runtime::state(const std::string& id) {
    const auto r = run_command(argv({"state", id}), runtime_timeout);
    if (r.exit_code != 0) return {id, "", 0, ""};
    return parse(nlohmann::json::parse(r.output, nullptr, false), id);
}

std::vector<runtime_container> cli_runtime::list() {
    std::vector<runtime_container> out;
    std::error_code ec;
    if (!fs::is_directory(root_, ec)) return out;  // never used: nothing to ask the runtime
    const auto r = run_command(argv({"list", "--format", "json"}), runtime_timeout);
    if (r.exit_code != 0) return out;
    const auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (!j.is_array()) return out;  // runsc says "null" when there are none
    for (const auto& c : j) out.push_back(parse(c, ""));
    return out;
}

}  // namespace cellgate::launcher
