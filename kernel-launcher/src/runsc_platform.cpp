#include "runsc_platform.hpp"

#include "cellgate/launcher/oci_runtime.hpp"
#include "command.hpp"
#include "host_fs.hpp"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cellgate::launcher {
namespace fs = std::filesystem;
using json = nlohmann::json;

struct runsc_platform::state {
    std::once_flag decided;
    runsc_platform::options opts;
    mutable std::mutex m;
    mutable std::condition_variable done;
    std::string platform;
    std::string reason;
    bool probing = false;
};

namespace {

struct verdict {
    std::string platform;
    std::string reason;
};

std::string boot_id() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    std::getline(in, id);
    return id;
}

// What the verdict depends on besides the boot: runsc's very file (a new
// build, or a test's stand-in, is probed anew) and the device.
std::string cache_key(const std::string& runsc_file) {
    struct stat st {};
    std::ostringstream key;
    key << runsc_file;
    if (::stat(runsc_file.c_str(), &st) == 0)
        key << ' ' << st.st_dev << ':' << st.st_ino << ' ' << st.st_size << ' ' << st.st_mtim.tv_sec << '.'
            << st.st_mtim.tv_nsec;
    key << " /dev/kvm";
    return key.str();
}

fs::path cache_file(const fs::path& dir, const std::string& key) {
    return dir / ("kvm-" + name_hash(key, 16) + ".json");
}

std::optional<verdict> read_cached(const fs::path& file, const std::string& key) {
    std::ifstream in(file);
    if (!in) return std::nullopt;
    const auto j = json::parse(in, nullptr, false);
    if (!j.is_object() || j.value("boot_id", "") != boot_id() || j.value("key", "") != key) return std::nullopt;
    const auto platform = j.value("platform", "");
    if (platform != "kvm" && platform != "ptrace") return std::nullopt;
    return verdict{platform, j.value("reason", "") + " (this boot's verdict, kept in " + file.string() + ")"};
}

void write_cached(const fs::path& file, const std::string& key, const verdict& v) {
    const json j{{"boot_id", boot_id()}, {"key", key}, {"platform", v.platform}, {"reason", v.reason}};
    const auto tmp = file.string() + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << j.dump() << '\n';
        if (!out) return;
    }
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec) fs::remove(tmp, ec);
}

std::string last_line(std::string text) {
    text.erase(text.find_last_not_of("\n \t") + 1);
    return text.substr(text.rfind('\n') + 1);  // npos + 1 is 0: the whole of a one-line text
}

// `runsc --platform=kvm do /bin/true` in a directory of its own, killed at
// `bound`; setpriv makes it die with this thread should the process end
// first, and nice keeps a spinning guest off the busy core's back.
verdict probe(const std::string& runsc, std::chrono::milliseconds bound) {
    char tmpl[] = "/tmp/cellgate-runsc-kvm-probe-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return {"ptrace", "no directory for the kvm probe; ptrace"};
    const fs::path dir = tmpl;
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = run_command({"setpriv", "--pdeathsig", "KILL", "--", "env", "TMPDIR=" + dir.string(), "nice", "-n",
                                "19", runsc, "--root", (dir / "root").string(), "--platform=kvm", "--network=none",
                                "do", "/bin/true"},
                               bound);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (r.exit_code == 0)
        return {"kvm", "/dev/kvm makes virtual machines and runsc ran a process on it in " + std::to_string(ms.count()) +
                           " ms"};
    if (r.timed_out)
        return {"ptrace", "/dev/kvm makes virtual machines, but runsc on kvm did not run /bin/true within " +
                              std::to_string(bound.count()) + " ms (a guest that hangs); ptrace"};
    return {"ptrace", "/dev/kvm makes virtual machines, but runsc on kvm failed (exit " + std::to_string(r.exit_code) +
                          ": " + last_line(r.output) + "); ptrace"};
}

// An exclusive lock on `dir`/probe.lock, so that one process probes at a
// time and the others read its verdict; -1 when there is none to take.
int lock_probe(const fs::path& dir) {
    const int fd = ::open((dir / "probe.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 && ::flock(fd, LOCK_EX) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

}  // namespace

runsc_platform::runsc_platform(options o) : state_(std::make_shared<state>()) { state_->opts = std::move(o); }

void runsc_platform::decide() const {
    std::call_once(state_->decided, [this] { decide_now(); });
}

void runsc_platform::decide_now() const {
    auto& s = *state_;
    auto o = s.opts;
    const auto say = [&] {
        if (o.note) o.note("runsc: platform " + s.platform + ": " + s.reason);
    };
    const auto settle = [&](verdict v) {
        s.platform = std::move(v.platform);
        s.reason = std::move(v.reason);
        say();
    };
    std::string why;
    std::string file;
    if (o.requested != "auto") {
        settle({o.requested, "as configured (--runsc-platform " + o.requested + ")"});
    } else if ((o.device_check ? o.device_check(&why) : resolve_runsc_platform("auto", &why)) != "kvm") {
        settle({"ptrace", why + "; ptrace"});
    } else if (file = find_executable(o.runsc); file.empty()) {
        settle({"ptrace", why + ", but runsc is not installed; ptrace"});
    }
    if (!s.platform.empty()) return;

    const auto key = cache_key(fs::weakly_canonical(file).string());
    std::error_code ec;
    if (!o.cache_dir.empty()) fs::create_directories(o.cache_dir, ec);
    const bool cache = !o.cache_dir.empty() && !ec && ::access(o.cache_dir.c_str(), W_OK) == 0;
    if (auto v = cache ? read_cached(cache_file(o.cache_dir, key), key) : std::nullopt) {
        settle(std::move(*v));
        return;
    }
    s.platform = "ptrace";
    s.reason = why + "; ptrace until runsc proves kvm (probing in the background, at most " +
               std::to_string(o.probe_bound.count()) + " ms)";
    s.probing = true;
    say();
    std::thread([st = state_, o = std::move(o), file, key, cache] {
        int lock = -1;
        std::optional<verdict> v;
        if (cache) {
            lock = lock_probe(o.cache_dir);  // another process may be probing: its verdict then
            v = read_cached(cache_file(o.cache_dir, key), key);
        }
        if (!v) {
            v = probe(file, o.probe_bound);
            if (cache) write_cached(cache_file(o.cache_dir, key), key, *v);
        }
        if (lock >= 0) ::close(lock);
        if (o.note) o.note("runsc: platform " + v->platform + " for new sandboxes: " + v->reason);
        {
            std::lock_guard l(st->m);
            st->platform = v->platform;
            st->reason = v->reason;
            st->probing = false;
        }
        st->done.notify_all();  // the last thing this thread does with anything but its own copies
    }).detach();
}

std::string runsc_platform::platform() const {
    decide();
    std::lock_guard l(state_->m);
    return state_->platform;
}

std::string runsc_platform::reason() const {
    decide();
    std::lock_guard l(state_->m);
    return state_->reason;
}

bool runsc_platform::settled(std::chrono::milliseconds bound) const {
    decide();
    std::unique_lock l(state_->m);
    return state_->done.wait_for(l, bound, [&] { return !state_->probing; });
}

}  // namespace cellgate::launcher
