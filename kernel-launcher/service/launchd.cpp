// cellgate-launchd: the small privileged half of cellgate. It owns the
// launcher (runc/runsc, cgroups, mounts, workspaces) and serves a closed set
// of requests on a unix socket that only the gateway's user may use. The
// gateway, which parses everything that comes from the network, runs
// without privileges and reaches workspaces through id-mapped views.
//
//   cellgate-launchd --socket /run/cellgate/launcher.sock --client-user cellgate
//                    [--state-dir D] [--image-store D] [--workspace-root D] [--runc PATH]
#include "cellgate/launcher/launcher.hpp"
#include "cellgate/launcher/node_settings.hpp"
#include "cellgate/launcher/service.hpp"
#include "exec_wire.hpp"
#include "host_fs.hpp"
#include "workspace_view.hpp"

#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cellgate::launcher;

namespace {

std::atomic<bool> stopping{false};
std::atomic<int> active{0};
constexpr int max_active = 64;

struct options {
    fs::path socket = "/run/cellgate/launcher.sock";
    launcher_config launcher;
    std::string client_user;
    uid_t client_uid = 0;
    gid_t client_gid = 0;
    bool views = false;  // an unprivileged client: give it id-mapped workspace views
};

void log(const std::string& line) { std::cerr << "cellgate-launchd: " << line << std::endl; }

class service_impl {
public:
    explicit service_impl(const options& o) : o_(o), launcher_(o.launcher), views_(o.launcher.state_dir / "views") {
        std::error_code ec;
        fs::create_directories(views_, ec);
        ::chmod(views_.c_str(), 0711);  // the client may enter a view it knows the name of, not list them
    }

    json handle(const service::request& r) {
        using service::op;
        switch (r.op) {
        case op::create: {
            auto info = launcher_.launch(r.spec);
            try {
                open_to_client(info);
            } catch (...) {
                launcher_.remove(info.id);
                throw;
            }
            return to_persisted_json(info);
        }
        case op::checkpoint: {
            // The workspace's view stays: a paused session's files are still read and written.
            const auto c = launcher_.checkpoint(r.id);
            return json{{"memory", c.memory}, {"image_bytes", c.image_bytes}, {"ms", c.ms}};
        }
        case op::restore: {
            auto info = launcher_.restore(r.id);
            try {
                open_to_client(info);
            } catch (...) {
                launcher_.remove(info.id, {.keep_workspace = true});
                throw;
            }
            return to_persisted_json(info);
        }
        case op::snapshot: {
            const auto s = launcher_.snapshot_workspace(r.id, r.snapshot);
            return json{{"bytes", s.bytes}, {"disk_bytes", s.disk_bytes}, {"reflinked", s.reflinked}, {"ms", s.ms}};
        }
        case op::remove_snapshot: launcher_.remove_snapshot(r.snapshot); return nullptr;
        case op::create_volume: launcher_.create_volume(r.volume, r.bytes); return nullptr;
        case op::volume_usage: {
            const auto u = launcher_.volume_usage(r.volume);
            return json{{"bytes", u.bytes}, {"used_bytes", u.used_bytes}};
        }
        case op::remove_volume: launcher_.remove_volume(r.volume); return nullptr;
        case op::build_step: return launcher_.run_build_step(r.step);
        case op::remove_layer: launcher_.remove_layer(r.layer); return nullptr;
        case op::import_image: return launcher_.import_image(r.import);
        case op::validate: launcher_.validate(r.spec); return nullptr;
        case op::signal: launcher_.signal(r.id, r.signal); return nullptr;
        case op::status: return service::status_to_json(as_seen(launcher_.status(r.id)));
        case op::list: {
            json out = json::array();
            for (auto& s : launcher_.list()) out.push_back(service::status_to_json(as_seen(std::move(s))));
            return out;
        }
        case op::remove:
            service::remove_workspace_view(views_ / r.id);
            launcher_.remove(r.id, {.keep_workspace = r.keep_workspace});
            return nullptr;
        case op::set_cpu_shares: launcher_.set_cpu_shares(r.id, r.shares); return nullptr;
        case op::usage: return service::usage_to_json(launcher_.usage(r.id, r.reset_peak));
        case op::exec: throw service::bad_request("exec is served on its own connection");
        case op::reap: {
            std::set<std::string> live;
            for (const auto& s : launcher_.list()) live.insert(s.id);
            std::error_code ec;
            for (const auto& e : fs::directory_iterator(views_, ec))
                if (live.count(e.path().filename().string()) == 0) service::remove_workspace_view(e.path());
            return launcher_.reap_orphans(r.keep, r.unused_workspaces);
        }
        }
        throw service::bad_request("unknown op");
    }

    exec_process exec(const service::request& r) { return launcher_.exec(r.id, r.process); }

private:
    // What the unprivileged client needs from a fresh sandbox: its five
    // sockets connectable by the client's group (the run dir is already
    // locked against the kernel), and a view of the workspace it may write.
    void open_to_client(sandbox_info& info) {
        if (!o_.views) return;
        for (const auto* endpoint : {&info.endpoints.shell, &info.endpoints.iopub, &info.endpoints.stdin_,
                                     &info.endpoints.control, &info.endpoints.hb}) {
            const std::string prefix = "ipc://";
            if (endpoint->rfind(prefix, 0) != 0) continue;
            const auto path = endpoint->substr(prefix.size());
            // Through one O_PATH descriptor each (review L3): the relay owns
            // the directory under gVisor and could swap a name for a symlink
            // between a check and a chmod that follows it.
            change_owner("open-to-client", path, 0, o_.client_gid, 0660, S_IFSOCK);
            // Under gVisor the sockets are the host relay's, in a directory of
            // the sandbox's uid that others may not enter: the client's group
            // may (r-x, so it finds the sockets but creates nothing there).
            const auto dir = fs::path(path).parent_path();
            struct stat ds {};
            if (::lstat(dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode))
                throw launch_error("open-to-client", "not a directory: " + dir.string());
            if ((ds.st_mode & S_IXOTH) == 0 && ds.st_gid != o_.client_gid)
                change_owner("open-to-client", dir, kNoChange, o_.client_gid, (ds.st_mode & 0700) | 0050, S_IFDIR);
        }
        const auto view = views_ / info.id;
        service::remove_workspace_view(view);
        try {
            service::make_workspace_view(info.workspace_dir, view, info.host_uid_base + info.spec.uid,
                                         info.host_uid_base + info.spec.gid, o_.client_uid, o_.client_gid);
        } catch (const std::exception& e) {
            throw launch_error("open-to-client", e.what());
        }
        info.workspace_dir = view.string();
    }

    // Replies name the client's view of a workspace, not the root-only one.
    sandbox_status as_seen(sandbox_status s) {
        if (o_.views && s.info) {
            const auto view = views_ / s.id;
            if (fs::exists(view)) s.info->workspace_dir = view.string();
        }
        return s;
    }

    const options& o_;
    launcher launcher_;
    fs::path views_;
};

json error_reply(const char* kind, const std::string& step, const std::string& message, int error_number = 0) {
    return {{"ok", false}, {"error", {{"kind", kind}, {"step", step}, {"message", message}, {"errno", error_number}}}};
}

// Sends the exec's reply line with the process's descriptors attached.
bool send_with_fds(int fd, const std::string& text, const std::vector<int>& fds) {
    iovec iov{const_cast<char*>(text.data()), text.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    ssize_t n = -1;
    do n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0) return false;
    // The descriptors went with the first byte; the rest of the line is plain.
    for (auto done = static_cast<std::size_t>(n); done < text.size();) {
        const auto m = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) return false;
        done += static_cast<std::size_t>(m);
    }
    return true;
}

// The connection is the process's handle from here: signal lines in, one
// exit line out. Whatever ends it early (the client closing, a line outside
// the protocol) drops the process, which kills it.
void hold_exec(int fd, exec_process p, std::string pending, const std::string& who) {
    std::vector<std::string> names;
    std::vector<unique_fd> theirs;
    if (p.tty()) {
        names.push_back("pty");
        theirs.push_back(p.take_pty());
    } else {
        if (p.stdin_fd() >= 0) {
            names.push_back("stdin");
            theirs.push_back(p.take_stdin());
        }
        names.push_back("stdout");
        theirs.push_back(p.take_stdout());
        names.push_back("stderr");
        theirs.push_back(p.take_stderr());
    }
    std::vector<int> raw;
    for (const auto& f : theirs) raw.push_back(f.get());
    const json reply{{"ok", true}, {"result", {{"tty", p.tty()}, {"fds", names}}}};
    if (!send_with_fds(fd, reply.dump() + "\n", raw)) {
        log(who + " exec: the client went before its reply; process killed");
        return;
    }
    theirs.clear();  // the client's now; ours would keep a pipe open
    line_buffer in(max_signal_line_bytes);
    bool ok = in.append(pending);
    for (;;) {
        while (ok) {
            const auto line = in.pop();
            if (!line) break;
            const auto sig = parse_signal_line(*line);
            if (!sig) {
                ok = false;
                break;
            }
            try {
                p.signal(*sig);
            } catch (const std::exception& e) {
                log(who + " exec: signal failed: " + e.what());
            }
        }
        if (!ok) {
            log(who + " exec: a line outside the protocol; process killed");
            return;
        }
        pollfd fds[2] = {{fd, POLLIN, 0}, {p.exit_fd(), POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[1].revents != 0) {
            if (const auto st = p.exit_status()) {
                const auto text = exit_line(*st);
                (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
                return;
            }
        }
        if (fds[0].revents != 0) {
            char buf[512];
            const auto n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) return;  // the handle is closed: the process goes with it
            ok = in.append({buf, static_cast<std::size_t>(n)});
        }
    }
}

void serve(service_impl& svc, int fd, uid_t peer) {
    struct closer {
        int fd;
        bool counted = true;
        ~closer() {
            ::close(fd);
            if (counted) --active;
        }
    } c{fd};
    timeval timeout{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    std::string line;
    char buf[65536];
    while (line.find('\n') == std::string::npos) {
        const auto n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        line.append(buf, static_cast<std::size_t>(n));
        if (line.size() > service::max_request_bytes) break;
    }
    std::string rest;
    if (const auto nl = line.find('\n'); nl != std::string::npos) {
        rest = line.substr(nl + 1);
        line.resize(nl);
    }
    json reply;
    std::string what = "?";
    std::optional<exec_process> process;
    try {
        const auto r = service::parse_request(line);
        what = service::to_json(r).value("op", "?");
        if (r.op == service::op::exec)
            process = svc.exec(r);
        else
            reply = {{"ok", true}, {"result", svc.handle(r)}};
    } catch (const service::bad_request& e) {
        reply = error_reply("request", "request", e.what());
    } catch (const spec_error& e) {
        reply = error_reply("spec", e.step(), e.what());
    } catch (const launch_error& e) {
        reply = error_reply("launch", e.step(), e.what(), e.error_number());
    } catch (const std::exception& e) {
        reply = error_reply("internal", "internal", e.what());
    }
    if (process) {
        // A running process counts against the launcher's exec limits, not
        // against the requests being served.
        c.counted = false;
        --active;
        hold_exec(fd, std::move(*process), std::move(rest), "uid " + std::to_string(peer));
        return;
    }
    if (reply["ok"] != true)
        log("uid " + std::to_string(peer) + " " + what + ": refused: " + reply["error"]["message"].get<std::string>());
    const auto text = reply.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    for (std::size_t done = 0; done < text.size();) {
        const auto n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
    }
}

options parse_args(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "--socket") o.socket = value();
        else if (a == "--client-user") o.client_user = value();
        else if (a == "--state-dir") o.launcher.state_dir = value();
        else if (a == "--image-store") o.launcher.image_store = value();
        else if (a == "--workspace-root") o.launcher.workspace_root = value();
        else if (a == "--egress-root") o.launcher.egress_root = value();
        else if (a == "--runc") o.launcher.runc_path = value();
        else if (is_node_option(a))
            apply_node_option(o.launcher, a, value());
        else if (a == "--help" || a == "-h")
            throw std::invalid_argument(
                "usage: cellgate-launchd [--socket PATH] [--client-user USER] [--state-dir D] [--image-store D] "
                "[--workspace-root D] [--egress-root D] [--runc PATH] " + std::string(node_options_usage));
        else throw std::invalid_argument("unknown option " + a);
    }
    if (!o.client_user.empty()) {
        const passwd* pw = ::getpwnam(o.client_user.c_str());
        if (pw == nullptr) throw std::invalid_argument("no such user: " + o.client_user);
        if (pw->pw_uid == 0) throw std::invalid_argument("the client user must not be root");
        o.client_uid = pw->pw_uid;
        o.client_gid = pw->pw_gid;
        o.views = true;
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    try {
        o = parse_args(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "cellgate-launchd: " << e.what() << "\n";
        return 2;
    }
    if (::geteuid() != 0) {
        std::cerr << "cellgate-launchd: must run as root (it starts sandboxes)\n";
        return 2;
    }
    o.launcher.note = [](const std::string& line) { log(line); };
    std::signal(SIGPIPE, SIG_IGN);
    struct sigaction sa {};
    sa.sa_handler = [](int) { stopping = true; };
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);

    try {
        service_impl svc(o);
        const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (o.socket.native().size() >= sizeof addr.sun_path)
            throw std::runtime_error("--socket " + o.socket.string() + " is " + std::to_string(o.socket.native().size()) +
                                     " bytes long; a unix socket's path holds at most " +
                                     std::to_string(sizeof addr.sun_path - 1));
        std::memcpy(addr.sun_path, o.socket.c_str(), o.socket.native().size());
        fs::create_directories(o.socket.parent_path());
        ::unlink(o.socket.c_str());
        const auto old_mask = ::umask(0177);
        if (::bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
            throw std::runtime_error("bind " + o.socket.string() + ": " + std::strerror(errno));
        ::umask(old_mask);
        // Root and the client's group only; SO_PEERCRED checks the user too.
        if (o.views && (::chown(o.socket.c_str(), 0, o.client_gid) != 0 || ::chmod(o.socket.c_str(), 0660) != 0))
            throw std::runtime_error("cannot open the socket to group " + std::to_string(o.client_gid));
        if (::listen(listener, 128) != 0) throw std::runtime_error("listen failed");
        log("serving on " + o.socket.string() +
            (o.views ? " for user " + o.client_user + " (uid " + std::to_string(o.client_uid) + ")" : " for root only"));
        while (!stopping) {
            pollfd p{listener, POLLIN, 0};
            if (::poll(&p, 1, 500) <= 0) continue;
            const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            ucred cred{};
            socklen_t len = sizeof cred;
            if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
                (cred.uid != 0 && !(o.views && cred.uid == o.client_uid))) {
                log("refused a connection from uid " + std::to_string(cred.uid));
                ::close(fd);
                continue;
            }
            if (active.load() >= max_active) {
                const auto busy = error_reply("internal", "busy", "too many requests at once").dump() + "\n";
                (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
                ::close(fd);
                continue;
            }
            ++active;
            std::thread([&svc, fd, uid = cred.uid] { serve(svc, fd, uid); }).detach();
        }
        ::close(listener);
        ::unlink(o.socket.c_str());
        for (int i = 0; i < 600 && active.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        log("stopped (sandboxes keep running; a restarted service finds them)");
    } catch (const std::exception& e) {
        log(e.what());
        return 1;
    }
    return 0;
}
