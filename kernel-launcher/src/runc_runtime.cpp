#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/oci_runtime.hpp"
#include "command.hpp"
#include "host_fs.hpp"

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstring>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

constexpr auto runtime_timeout = std::chrono::seconds(60);

std::string signal_name(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
}

class runc_runtime final : public oci_runtime {
public:
    runc_runtime(std::string runc_path, fs::path state_root)
        : runc_(std::move(runc_path)), root_(std::move(state_root)) {}

    std::string_view name() const override { return "runc"; }

    std::string unavailable_reason() const override {
        if (find_executable(runc_).empty()) return "runc is not installed (no executable '" + runc_ + "')";
        return {};
    }

    std::int64_t run(const std::string& id, const fs::path& bundle, const container_stdio& io) override {
        const auto pid_file = bundle / "init.pid";
        command_fds fds;
        fds.stdin_fd = io.stdin_fd;
        fds.stdout_fd = io.stdout_fd;
        fds.stderr_fd = io.log_fd;
        const auto r = run_command(argv({"run", "--detach", "--bundle", bundle.string(), "--pid-file",
                                         pid_file.string(), id}),
                                   runtime_timeout, fds);
        if (r.timed_out) throw launch_error("runtime-run", "runc run timed out", ETIMEDOUT);
        if (r.exit_code != 0)
            throw launch_error("runtime-run", "runc run exited " + std::to_string(r.exit_code) +
                                                  ": " + read_tail(bundle / "kernel.log", 2048));
        try {
            return std::stoll(read_file(pid_file, 32));
        } catch (...) {
            throw launch_error("runtime-run", "runc wrote no pid file", ENOENT);
        }
    }

    void kill(const std::string& id, int signal, bool all_processes) override {
        std::vector<std::string> args = {"kill"};
        if (all_processes) args.push_back("--all");
        args.push_back(id);
        args.push_back(signal_name(signal));
        const auto r = run_command(argv(args), runtime_timeout);
        if (r.exit_code != 0 && !not_found(r.output) &&
            r.output.find("not running") == std::string::npos &&
            r.output.find("process already finished") == std::string::npos)
            throw launch_error("runtime-kill", "runc kill: " + r.output);
    }

    void remove(const std::string& id) override {
        const auto r = run_command(argv({"delete", "--force", id}), runtime_timeout);
        if (r.exit_code != 0 && !not_found(r.output))
            throw launch_error("runtime-delete", "runc delete: " + r.output);
    }

    runtime_container state(const std::string& id) override {
        const auto r = run_command(argv({"state", id}), runtime_timeout);
        if (r.exit_code != 0) return {id, "", 0, ""};
        return parse(nlohmann::json::parse(r.output, nullptr, false), id);
    }

    std::vector<runtime_container> list() override {
        const auto r = run_command(argv({"list", "--format", "json"}), runtime_timeout);
        std::vector<runtime_container> out;
        if (r.exit_code != 0) return out;
        const auto j = nlohmann::json::parse(r.output, nullptr, false);
        if (!j.is_array()) return out;
        for (const auto& c : j) out.push_back(parse(c, ""));
        return out;
    }

private:
    std::vector<std::string> argv(std::vector<std::string> args) const {
        std::vector<std::string> out = {runc_, "--root", root_.string()};
        out.insert(out.end(), args.begin(), args.end());
        return out;
    }

    static bool not_found(const std::string& output) {
        return output.find("does not exist") != std::string::npos ||
               output.find("not found") != std::string::npos;
    }

    static runtime_container parse(const nlohmann::json& j, const std::string& fallback_id) {
        runtime_container c;
        c.id = fallback_id;
        if (!j.is_object()) return c;
        c.id = j.value("id", fallback_id);
        c.status = j.value("status", std::string());
        c.pid = j.value("pid", std::int64_t{0});
        c.bundle = j.value("bundle", std::string());
        return c;
    }

    std::string runc_;
    fs::path root_;
};

}  // namespace

std::unique_ptr<oci_runtime> make_runc_runtime(std::string runc_path, fs::path state_root) {
    return std::make_unique<runc_runtime>(std::move(runc_path), std::move(state_root));
}

}  // namespace cellgate::launcher
