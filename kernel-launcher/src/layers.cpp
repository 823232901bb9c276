#include "layers.hpp"

#include "cellgate/launcher/build_step.hpp"
#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/unique_fd.hpp"
#include "cellgate/protocol/message.hpp"
#include "host_fs.hpp"
#include "spec_validation.hpp"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

namespace cellgate::launcher {
namespace fs = std::filesystem;

namespace {

constexpr const char* step = "layer";

std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

// A user namespace whose ids 0…65535 are host_id_base…, held by a child that
// waits until the returned descriptor is open, then exits.
unique_fd user_namespace_of(std::uint32_t host_id_base) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) throw launch_error(step, "pipe", errno);
    const pid_t child = ::fork();
    if (child < 0) {
        const int e = errno;
        ::close(ready[0]);
        ::close(ready[1]);
        throw launch_error(step, "fork", e);
    }
    if (child == 0) {
        ::close(ready[1]);
        if (::unshare(CLONE_NEWUSER) != 0) ::_exit(1);
        char c;
        (void)!::read(ready[0], &c, 1);  // until the parent has what it needs (or is gone)
        ::_exit(0);
    }
    ::close(ready[0]);
    struct reaped {
        pid_t pid;
        ~reaped() { ::waitpid(pid, nullptr, 0); }
    } reap{child};
    unique_fd release(ready[1]);  // closed first: then the child exits and is reaped
    // The child's unshare happens after fork: wait until its namespace differs.
    const auto own = fs::read_symlink("/proc/self/ns/user");
    const auto ns = "/proc/" + std::to_string(child) + "/ns/user";
    for (int i = 0; i < 2000; ++i) {
        std::error_code ec;
        const auto theirs = fs::read_symlink(ns, ec);
        if (ec) throw launch_error(step, "the user namespace helper exited", ECHILD);
        if (theirs != own) break;
        ::usleep(500);
    }
    const auto map = "0 " + std::to_string(host_id_base) + " 65536";
    for (const char* file : {"uid_map", "gid_map"}) {
        const auto path = "/proc/" + std::to_string(child) + "/" + file;
        const unique_fd f(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
        if (!f || ::write(f.get(), map.data(), map.size()) != static_cast<ssize_t>(map.size()))
            throw launch_error(step, std::string("writing the helper's ") + file, errno);
    }
    unique_fd out(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!out) throw launch_error(step, "opening the helper's user namespace", errno);
    return out;
}

std::mutex& mount_mutex() {
    static std::mutex m;
    return m;
}

}  // namespace

bool is_valid_layer_id(std::string_view id) {
    return id.size() == 48 &&
           std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

fs::path layers_dir(const launcher_config& config) { return config.image_store / ".layers"; }

fs::path new_layer_store(const std::string& id, const launcher_config& config, const std::string& step) {
    const fs::path store = layers_dir(config);
    std::error_code ec;
    if (fs::exists(store / id, ec)) throw launch_error(step, "layer " + id + " exists already", EEXIST);
    fs::create_directories(config.image_store, ec);
    make_dir(step, store, 0755);
    return store;
}

std::uint64_t seal_layer(const fs::path& tmp, const std::string& id, const std::string& parent,
                         const launcher_config& config, const std::string& step) {
    const auto bytes = files_bytes(tmp / "diff");
    write_file(step, tmp / "parent", parent + "\n", 0644);
    write_file(step, tmp / "bytes", std::to_string(bytes) + "\n", 0644);
    write_file(step, tmp / ".complete", "", 0644);
    ::chmod(tmp.c_str(), 0755);
    if (::rename(tmp.c_str(), (layers_dir(config) / id).c_str()) != 0)
        throw launch_error(step, "layer " + id + " exists already", errno == ENOTEMPTY ? EEXIST : errno);
    return bytes;
}

std::uint64_t files_bytes(const fs::path& dir) {
    std::uint64_t total = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
        if (it->symlink_status(ec).type() == fs::file_type::regular) total += it->file_size(ec);
    return total;
}

std::string random_hex(int digits) {
    auto u = protocol::make_uuid();
    u.erase(std::remove(u.begin(), u.end(), '-'), u.end());
    return u.substr(0, static_cast<std::size_t>(digits));
}

std::vector<fs::path> layer_lowers(const std::string& parent, const launcher_config& config) {
    std::vector<fs::path> out;
    std::string at = parent;
    while (at.starts_with("l-")) {
        const std::string id = at.substr(2);
        if (!is_valid_layer_id(id)) throw spec_error("'" + at.substr(0, 80) + "' is not a layer id");
        const fs::path dir = layers_dir(config) / id;
        std::error_code ec;
        if (!fs::exists(dir / ".complete", ec)) throw spec_error("no layer " + id + " in the image store");
        if (out.size() == max_layer_depth)
            throw spec_error("a template stacks at most " + std::to_string(max_layer_depth) + " layers");
        out.push_back(dir / "diff");
        const auto p = trimmed(read_file(dir / "parent", 4096));
        if (p.starts_with("layer ")) {
            at = "l-" + p.substr(6);
        } else if (p.starts_with("base ")) {
            return out;  // a registry image's root: nothing below it
        } else if (p.starts_with("image ")) {
            const fs::path rootfs = p.substr(6);
            // Only a build of the store's own images, as it was resolved then.
            const auto rel = rootfs.lexically_relative(config.image_store);
            if (rel.empty() || *rel.begin() == ".." || *rel.begin() == ".layers" || rootfs.filename() != "rootfs" ||
                !fs::is_directory(rootfs / "usr", ec))
                throw spec_error("layer " + id + " stands on an image that is gone: " + rootfs.string());
            out.push_back(rootfs);
            return out;
        } else {
            throw spec_error("layer " + id + " has an unreadable parent record");
        }
    }
    out.push_back(resolve_image(at, config));
    return out;
}

fs::path layer_rootfs(const std::string& id, const launcher_config& config) {
    const auto lowers = layer_lowers("l-" + id, config);
    const fs::path target = layers_dir(config) / id / "rootfs";
    const std::lock_guard lock(mount_mutex());
    if (is_mount_point(target)) return target;
    make_dir(step, target, 0755);
    std::string options = "lowerdir=";
    for (std::size_t i = 0; i < lowers.size(); ++i) options += (i ? ":" : "") + lowers[i].string();
    if (options.size() >= 4000) throw spec_error("layer " + id + ": its chain is too long to mount");
    if (::mount("overlay", target.c_str(), "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, options.c_str()) != 0)
        throw launch_error(step, "mounting layer " + id + " read-only", errno);
    return target;
}

void mount_idmapped(const fs::path& source, const fs::path& target, std::uint32_t host_id_base) {
    const auto ns = user_namespace_of(host_id_base);
    const unique_fd tree(static_cast<int>(
        ::syscall(SYS_open_tree, AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
    if (!tree) throw launch_error(step, "open_tree " + source.string(), errno);
    mount_attr attr{};
    attr.attr_set = static_cast<__u64>(MOUNT_ATTR_IDMAP) | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    attr.userns_fd = static_cast<__u64>(static_cast<unsigned>(ns.get()));
    if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        throw launch_error(step, "an idmapped mount of " + source.string(), errno);
    make_dir(step, target, 0755);
    if (::syscall(SYS_move_mount, tree.get(), "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
        throw launch_error(step, "move_mount to " + target.string(), errno);
}

}  // namespace cellgate::launcher
