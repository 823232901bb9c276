// cellgate-launch: a thin command line over the kernel-launcher library.
//   cellgate-launch run [options] [--exec CODE] [--rm]
//   cellgate-launch ps [--json] | status ID | kill ID [SIGNAL] | rm ID [--keep-workspace]
//   cellgate-launch exec ID CODE | exec ID [--tty] [--stdin] [--cwd D] [--env K=V]… -- ARGV…
//   cellgate-launch reap [--keep ID,…] | validate SPEC.json
#include "cell_runner.hpp"
#include "exec_session.hpp"
#include "cellgate/launcher/launcher.hpp"
#include "cellgate/launcher/node_settings.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace cellgate::launcher;
using args_t = std::vector<std::string>;

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::uint64_t parse_size(const std::string& text) {
    std::size_t used = 0;
    double value = 0;
    try {
        value = std::stod(text, &used);
    } catch (...) {
        throw usage_error("not a size: '" + text + "'");
    }
    if (value < 0) throw usage_error("a size cannot be negative: '" + text + "'");
    const std::string unit = text.substr(used);
    double mult = 1;
    if (unit == "k" || unit == "K" || unit == "KiB") mult = 1024.0;
    else if (unit == "m" || unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
    else if (unit == "g" || unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
    else if (!unit.empty() && unit != "b" && unit != "B") throw usage_error("unknown size unit in '" + text + "'");
    return static_cast<std::uint64_t>(value * mult);
}

std::uint32_t parse_u32(const std::string& text) {
    if (text.empty() || text[0] == '-') throw usage_error("not a non-negative number: '" + text + "'");
    try {
        return static_cast<std::uint32_t>(std::stoul(text));
    } catch (...) {
        throw usage_error("not a number: '" + text + "'");
    }
}

// Options every verb takes: where the launcher keeps its state.
launcher_config config_from(args_t& args) {
    launcher_config cfg;
    if (const char* v = std::getenv("CELLGATE_STATE_DIR")) cfg.state_dir = v;
    if (const char* v = std::getenv("CELLGATE_IMAGE_STORE")) cfg.image_store = v;
    if (const char* v = std::getenv("CELLGATE_WORKSPACE_ROOT")) cfg.workspace_root = v;
    args_t rest;
    for (std::size_t i = 0; i < args.size(); ++i) {
        auto take = [&]() -> std::string {
            if (i + 1 >= args.size()) throw usage_error(args[i] + " needs a value");
            return args[++i];
        };
        if (args[i] == "--state-dir") cfg.state_dir = take();
        else if (args[i] == "--image-store") cfg.image_store = take();
        else if (args[i] == "--workspace-root") cfg.workspace_root = take();
        else if (is_node_option(args[i])) {
            const auto name = args[i];
            apply_node_option(cfg, name, take());
        } else rest.push_back(args[i]);
    }
    args = rest;
    return cfg;
}

void print_json(const nlohmann::json& j) { std::cout << j.dump(2) << "\n"; }

int verb_run(launcher& l, const args_t& args) {
    sandbox_spec spec;
    std::string code;
    bool remove_after = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        auto take = [&]() -> std::string {
            if (i + 1 >= args.size()) throw usage_error(args[i] + " needs a value");
            return args[++i];
        };
        const auto& a = args[i];
        if (a == "--spec") {
            std::ifstream in(take());
            if (!in) throw usage_error("cannot read the spec file");
            spec = nlohmann::json::parse(in).get<sandbox_spec>();
        } else if (a == "--id") spec.id = take();
        else if (a == "--image") spec.image = take();
        else if (a == "--runtime") spec.runtime = take();
        else if (a == "--memory") spec.limits.memory_bytes = parse_size(take());
        else if (a == "--pids") spec.limits.pids = parse_u32(take());
        else if (a == "--cpus") spec.limits.cpu_millis = static_cast<std::uint32_t>(std::stod(take()) * 1000);
        else if (a == "--workspace") spec.workspace_dir = take();
        else if (a == "--workspace-size") spec.limits.workspace_bytes = parse_size(take());
        else if (a == "--tmp-size") spec.limits.tmp_bytes = parse_size(take());
        else if (a == "--nofile") spec.limits.nofile = parse_u32(take());
        else if (a == "--uid") spec.uid = parse_u32(take());
        else if (a == "--gid") spec.gid = parse_u32(take());
        else if (a == "--preload") spec.preload.push_back(take());
        else if (a == "--timeout") spec.start_timeout = std::chrono::milliseconds(static_cast<long>(std::stod(take()) * 1000));
        else if (a == "--env") {
            const auto kv = take();
            const auto eq = kv.find('=');
            if (eq == std::string::npos) throw usage_error("--env needs NAME=value");
            spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
        } else if (a == "--exec") code = take();
        else if (a == "--rm") remove_after = true;
        else throw usage_error("unknown option for run: " + a);
    }
    const auto info = l.launch(spec);
    int rc = 0;
    if (code.empty()) {
        print_json(info);
    } else {
        std::cerr << "cellgate-launch: sandbox " << info.id << " answered kernel_info in "
                  << static_cast<int>(info.step_ms.at("total")) << " ms\n";
        rc = run_cell(info.endpoints, code, std::chrono::seconds(120));
    }
    if (remove_after) l.remove(info.id);
    return rc;
}

int verb_ps(launcher& l, const args_t& args) {
    const bool as_json = !args.empty() && args[0] == "--json";
    const auto all = l.list();
    if (as_json) {
        print_json(all);
        return 0;
    }
    std::printf("%-38s %-9s %-8s %-4s %10s %s\n", "ID", "STATE", "PID", "OOM", "MEMORY", "WORKSPACE");
    for (const auto& s : all)
        std::printf("%-38s %-9s %-8lld %-4s %9lluM %s\n", s.id.c_str(), std::string(to_string(s.state)).c_str(),
                    static_cast<long long>(s.pid), s.oom_killed ? "yes" : "no",
                    static_cast<unsigned long long>(s.memory_bytes >> 20),
                    s.info ? s.info->workspace_dir.c_str() : "-");
    return 0;
}

const std::string& need_id(const args_t& args) {
    if (args.empty()) throw usage_error("this verb needs a sandbox id");
    return args[0];
}

int verb_status(launcher& l, const args_t& args) {
    const auto s = l.status(need_id(args));
    print_json(s);
    return s.state == sandbox_state::missing ? 1 : 0;
}

int verb_kill(launcher& l, const args_t& args) {
    int sig = SIGKILL;
    if (args.size() > 1) {
        std::string name = args[1];
        if (name.rfind("SIG", 0) == 0) name = name.substr(3);
        sig = 0;
        for (int s = 1; s < NSIG && sig == 0; ++s)
            if (const char* abbrev = sigabbrev_np(s); abbrev != nullptr && name == abbrev) sig = s;
        if (sig == 0) sig = static_cast<int>(parse_u32(args[1]));
    }
    l.signal(need_id(args), sig);
    return 0;
}

int verb_rm(launcher& l, const args_t& args) {
    remove_options o;
    for (std::size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--keep-workspace") o.keep_workspace = true;
        else throw usage_error("unknown option for rm: " + args[i]);
    }
    l.remove(need_id(args), o);
    return 0;
}

// `exec ID [options] -- ARGV…`: a process in the sandbox, beside its kernel.
int exec_process_verb(launcher& l, const args_t& args, std::size_t dashes) {
    exec_spec spec;
    for (std::size_t i = 1; i < dashes; ++i) {
        auto take = [&]() -> std::string {
            if (i + 1 >= dashes) throw usage_error(args[i] + " needs a value");
            return args[++i];
        };
        if (args[i] == "--tty") spec.tty = true;
        else if (args[i] == "--stdin") spec.stdin_ = true;
        else if (args[i] == "--cwd") spec.cwd = take();
        else if (args[i] == "--env") {
            const auto kv = take();
            const auto eq = kv.find('=');
            if (eq == std::string::npos) throw usage_error("--env needs NAME=value");
            spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
        } else throw usage_error("unknown option for exec: " + args[i]);
    }
    spec.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(dashes) + 1, args.end());
    if (spec.argv.empty()) throw usage_error("exec needs a command after --");
    auto p = l.exec(args[0], spec);
    return run_exec_session(p);
}

int verb_exec(launcher& l, const args_t& args) {
    if (const auto dashes = std::find(args.begin(), args.end(), "--"); dashes != args.end() && !args.empty() &&
                                                                        dashes != args.begin())
        return exec_process_verb(l, args, static_cast<std::size_t>(dashes - args.begin()));
    if (args.size() != 2) throw usage_error("exec needs a sandbox id and code, or a sandbox id, -- and a command");
    const auto s = l.status(args[0]);
    if (!s.info || s.state != sandbox_state::running) throw usage_error("sandbox " + args[0] + " is not running");
    return run_cell(s.info->endpoints, args[1], std::chrono::seconds(120));
}

int verb_reap(launcher& l, const args_t& args) {
    std::set<std::string> keep;
    bool workspaces = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--workspaces") {
            workspaces = true;
        } else if (args[i] == "--keep" && i + 1 < args.size()) {
            std::stringstream ids(args[++i]);
            for (std::string id; std::getline(ids, id, ',');) keep.insert(id);
        } else {
            throw usage_error("unknown option for reap: " + args[i]);
        }
    }
    for (const auto& id : l.reap_orphans(keep, workspaces)) std::cout << "reaped " << id << "\n";
    return 0;
}

int verb_validate(launcher& l, const args_t& args) {
    std::ifstream in(need_id(args));
    if (!in) throw usage_error("cannot read " + args[0]);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) throw spec_error("the spec file is not valid JSON");
    l.validate(j.get<sandbox_spec>());
    std::cout << "valid\n";
    return 0;
}

// One step of a template's build from a JSON spec (build_step.hpp); prints
// the result. Exit status: the step's.
int verb_build_step(launcher& l, const args_t& args) {
    std::ifstream in(need_id(args));
    if (!in) throw usage_error("cannot read " + args[0]);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) throw spec_error("the step file is not valid JSON");
    const auto r = l.run_build_step(j.get<build_step_spec>());
    std::cout << nlohmann::json(r).dump(2) << "\n";
    return r.exit_code == 0 ? 0 : 1;
}

struct verb {
    const char* name;
    int (*run)(launcher&, const args_t&);
    const char* help;
};

constexpr verb verbs[] = {
    {"run", verb_run, "run [--image NAME] [--runtime runc|runsc] [--memory 2G] [--pids N] [--cpus 1] [--workspace DIR] "
                      "[--workspace-size 1G] [--tmp-size 256M] [--env K=V]… [--preload MOD]… [--spec FILE] "
                      "[--exec CODE] [--rm]"},
    {"ps", verb_ps, "ps [--json]"},
    {"build-step", verb_build_step, "build-step FILE     (one step of a template's build, from its JSON)"},
    {"status", verb_status, "status ID"},
    {"kill", verb_kill, "kill ID [SIGNAL]     (default SIGKILL; SIGINT interrupts a cell)"},
    {"rm", verb_rm, "rm ID [--keep-workspace]"},
    {"exec", verb_exec, "exec ID CODE        (a cell in the kernel)\n"
                        "  exec ID [--tty] [--stdin] [--cwd DIR] [--env K=V]… -- ARGV…   (a process in the sandbox)"},
    {"reap", verb_reap, "reap [--keep ID,…] [--workspaces]   (remove orphaned and stopped sandboxes; with\n"
                        "                     --workspaces also workspaces no sandbox uses)"},
    {"validate", verb_validate, "validate SPEC.json"},
};

int usage(std::ostream& out) {
    out << "usage: cellgate-launch [--state-dir D] [--image-store D] [--workspace-root D] " << node_options_usage
        << " VERB …\n";
    for (const auto& v : verbs) out << "  " << v.help << "\n";
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    args_t args(argv + 1, argv + argc);
    try {
        auto cfg = config_from(args);
        if (args.empty() || args[0] == "--help" || args[0] == "-h") return usage(args.empty() ? std::cerr : std::cout);
        for (const auto& v : verbs) {
            if (args[0] != v.name) continue;
            launcher l(cfg);
            return v.run(l, args_t(args.begin() + 1, args.end()));
        }
        std::cerr << "cellgate-launch: unknown verb '" << args[0] << "'\n";
        return usage(std::cerr);
    } catch (const usage_error& e) {
        std::cerr << "cellgate-launch: " << e.what() << "\n";
        return 2;
    } catch (const spec_error& e) {
        std::cerr << "cellgate-launch: invalid request: " << e.what() << "\n";
        return 2;
    } catch (const launch_error& e) {
        std::cerr << "cellgate-launch: failed at step '" << e.step() << "': " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "cellgate-launch: " << e.what() << "\n";
        return 1;
    }
}
