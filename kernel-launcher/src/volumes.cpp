// Named volumes: ext4 images in <state dir>/volumes/<id>.img, loop mounted
// at <id>/ while they exist, bound into the sandboxes that ask for them
// (attach_volumes, read-only or owned by the writer's uid range). The state
// it owns is the volumes dir and its mounts, under impl::volumes_mutex.

#include "cellgate/launcher/launcher.hpp"

#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "spec_validation.hpp"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>

namespace cellgate::launcher {
using nlohmann::json;

fs::path launcher::impl::mounted_volume(const std::string& id) {
    const fs::path dir = volume_dir(id);
    const fs::path image = dir.string() + ".img";
    struct stat st{};
    if (::lstat(image.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        throw launch_error("prepare-volumes", "no volume '" + id + "'", ENOENT);
    if (is_mount_point(dir)) return dir;
    make_dir("prepare-volumes", dir, 0755);
    mount_ext4_image(image, dir);
    return dir;
}

fs::path launcher::impl::attach_volumes(const sandbox_spec& spec, const fs::path& run_dir, std::uint32_t host_id_base) {
    const fs::path top = run_dir / "volumes";
    make_dir("prepare-volumes", top, 0755);
    std::lock_guard lock(volumes_mutex);
    for (const auto& v : spec.volumes) {
        const fs::path dir = mounted_volume(v.volume);
        if (!v.read_only) {
            // Its writer owns its files: from the last writer's uid range to this one's.
            const fs::path meta = dir.string() + ".json";
            const auto j = json::parse(read_file(meta), nullptr, false);
            const auto last = j.is_object() ? j.value("host_id_base", std::int64_t{-1}) : std::int64_t{-1};
            if (last >= 0 && static_cast<std::uint32_t>(last) != host_id_base)
                remap_owners(dir, static_cast<std::uint32_t>(last), host_id_base);
            change_owner("prepare-volumes", dir, host_id_base + spec.uid, host_id_base + spec.gid, 0755);
            std::error_code ec;
            fs::remove(meta, ec);  // write_file makes a new file, never follows or reuses one
            write_file("prepare-volumes", meta, json{{"host_id_base", host_id_base}}.dump(), 0600);
        }
        const fs::path at = top / fs::path(v.path).filename();
        make_dir("prepare-volumes", at, 0755);
        if (::mount(dir.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) != 0)
            throw launch_error("prepare-volumes", "bind " + dir.string(), errno);
        const unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC | (v.read_only ? MS_RDONLY : 0);
        if (::mount(nullptr, at.c_str(), nullptr, flags, nullptr) != 0)
            throw launch_error("prepare-volumes", "remount " + at.string(), errno);
    }
    return top;
}

void launcher::create_volume(const std::string& volume, std::uint64_t bytes) {
    if (!is_valid_sandbox_id(volume)) throw spec_error("invalid volume id");
    if (bytes < (8ull << 20) || bytes > (64ull << 30)) throw spec_error("a volume has 8 MiB to 64 GiB");
    std::lock_guard lock(impl_->volumes_mutex);
    make_dir("create-volume", config_.state_dir / "volumes", 0711);
    const fs::path dir = impl_->volume_dir(volume);
    const fs::path image = dir.string() + ".img";
    if (fs::exists(image)) throw launch_error("create-volume", "volume '" + volume + "' exists", EEXIST);
    make_ext4_image(image, bytes, 0, 0, "volume");
    try {
        impl_->mounted_volume(volume);
        ::rmdir((dir / "lost+found").c_str());
    } catch (...) {
        std::error_code ec;
        fs::remove(image, ec);
        throw;
    }
}

volume_info launcher::volume_usage(const std::string& volume) {
    if (!is_valid_sandbox_id(volume)) throw spec_error("invalid volume id");
    std::lock_guard lock(impl_->volumes_mutex);
    const auto dir = impl_->mounted_volume(volume);
    struct statvfs v{};
    if (::statvfs(dir.c_str(), &v) != 0) throw launch_error("volume-usage", "statvfs " + dir.string(), errno);
    return {static_cast<std::uint64_t>(v.f_blocks) * v.f_frsize,
            static_cast<std::uint64_t>(v.f_blocks - v.f_bfree) * v.f_frsize};
}

void launcher::remove_volume(const std::string& volume) {
    if (!is_valid_sandbox_id(volume)) throw spec_error("invalid volume id");
    std::lock_guard lock(impl_->volumes_mutex);
    const fs::path dir = impl_->volume_dir(volume);
    for (const auto& m : mounts_under(dir)) unmount("remove-volume", m);
    std::error_code ec;
    fs::remove(dir, ec);
    fs::remove(dir.string() + ".img", ec);
    fs::remove(dir.string() + ".json", ec);
}

}  // namespace cellgate::launcher
