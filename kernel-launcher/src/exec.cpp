// Exec into a running sandbox: a process built from the sandbox's own
// (config.json), run by the runtime's exec under a cellgate-exec-shim, with
// pipes or a PTY for its stdio. The state it owns is the exec dirs under
// the socket root (one a start, removed once the shim has the process) and
// the places it reserves in impl::execs.

#include "cellgate/launcher/launcher.hpp"

#include "cellgate/protocol/message.hpp"
#include "exec_shim.hpp"
#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "spec_validation.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cellgate::launcher {
using nlohmann::json;

namespace {

// A directory removed with everything in it when the scope ends.
struct dir_remover {
    fs::path dir;
    ~dir_remover() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

}  // namespace

fs::path launcher::impl::make_exec_dir() const {
    const auto root = socket_root / "execs";
    ensure_socket_root();
    make_dir("exec", root, 0700);
    const auto dir = root / protocol::make_uuid();
    make_dir("exec", dir, 0700, /*must_not_exist=*/true);
    return dir;
}

namespace {

// The listening end of the console socket a runtime sends a PTY master to.
unique_fd listen_for_console(const fs::path& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.native().size() >= sizeof addr.sun_path)
        throw launch_error("exec", "the console socket path is too long (a shorter --state-dir helps): " + path.string(),
                           ENAMETOOLONG);
    std::memcpy(addr.sun_path, path.c_str(), path.native().size());
    unique_fd s{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (!s || ::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s.get(), 1) != 0)
        throw launch_error("exec", "console socket " + path.string(), errno);
    return s;
}

struct pipe_pair {
    unique_fd read, write;
};
pipe_pair make_pipe() {
    int fds[2] = {-1, -1};
    if (::pipe2(fds, O_CLOEXEC) != 0) throw launch_error("exec", "pipe", errno);
    return {unique_fd(fds[0]), unique_fd(fds[1])};
}

}  // namespace

exec_process launcher::impl::exec(const std::string& id, const exec_spec& spec) {
    const auto info = read_info(id);
    if (!info) throw launch_error("exec", "no sandbox '" + id + "'", ESRCH);
    oci_runtime& rt = runtime(info->runtime);
    if (rt.state(id).status != "running") throw launch_error("exec", "sandbox '" + id + "' is not running", ESRCH);
    const auto shim = find_exec_shim_binary(cfg.exec_shim_path);
    if (shim.empty())
        throw launch_error("exec", "cellgate-exec-shim is " +
                                       (cfg.exec_shim_path.empty() ? std::string("neither next to this program nor in PATH")
                                                                   : "not at '" + cfg.exec_shim_path + "'"),
                           ENOENT);
    auto place = execs.reserve(id, cfg.max_execs_per_sandbox, cfg.max_execs);

    // The process is the sandbox's own, as written at its launch (a root-only
    // file the kernel never sees), with the exec's argv, cwd, env and terminal.
    const auto config = json::parse(read_file(run_dir(id) / "config.json"), nullptr, false);
    if (!config.is_object() || !config.contains("process") || !config["process"].is_object())
        throw launch_error("exec", "the config.json of sandbox '" + id + "' is unreadable", EIO);
    const dir_remover dir{make_exec_dir()};
    exec_files files{dir.dir / "process.json", dir.dir, spec.tty ? dir.dir / "console" : fs::path()};
    write_file("exec", files.process_json,
               build_exec_process(config["process"], spec, base_environment(info->spec.limits)).dump(), 0600);

    exec_process::stdio ours;
    shim_stdio theirs;
    pipe_pair in, out, err;
    unique_fd console;
    if (spec.tty) {
        console = listen_for_console(files.console_socket);
    } else {
        if (spec.stdin_) {
            in = make_pipe();
            theirs.stdin_fd = in.read.get();
            ours.stdin_ = std::move(in.write);
        }
        out = make_pipe();
        err = make_pipe();
        theirs.stdout_fd = out.write.get();
        theirs.stderr_fd = err.write.get();
        ours.stdout_ = std::move(out.read);
        ours.stderr_ = std::move(err.read);
    }
    auto started = start_exec_shim(shim, shim_request{rt.exec_command_for(id, files), std::chrono::seconds(30)}, theirs,
                                   std::move(ours), console.get(), spec.rows, spec.cols);
    place.commit(started.watch);
    return std::move(started.process);
}

exec_process launcher::exec(const std::string& id, const exec_spec& spec) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    validate_exec_spec(spec);
    return impl_->exec(id, spec);
}

}  // namespace cellgate::launcher
