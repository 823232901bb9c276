#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace cellgate::launcher {

// A session's /workspace: an ext4 filesystem in a sparse image file, loop
// mounted at <root>/<name>. Writes past its size fail with ENOSPC inside the
// sandbox and the host disk never holds more than the cap. Each workspace owns
// a slot: a host uid/gid range of 65536 that its sandboxes map their ids to,
// so files keep their owner across kernel restarts and no two sessions share
// a host uid.
struct workspace {
    std::filesystem::path dir;
    std::uint32_t host_id_base = 0;
    bool created = false;  // made by this call (a teardown must remove it)
};

// A workspace image a new workspace starts as a copy of (a snapshot), and
// the host id base its files are owned under (they are moved to the new
// workspace's own range).
struct workspace_seed {
    std::filesystem::path image;
    std::uint32_t host_id_base = 0;
};

// What copy_image() wrote: the image's size and the blocks it took on disk
// (less with a reflink, which shares the source's blocks until either
// changes; only used blocks on a file system without one).
struct image_copy {
    std::uint64_t bytes = 0, disk_bytes = 0;
    bool reflinked = false;
};

// An ext4 file system in a sparse image file of `bytes`, its root owned by
// owner_uid:owner_gid; mounted loop, nosuid, nodev, noexec at `dir`.
void make_ext4_image(const std::filesystem::path& image, std::uint64_t bytes, std::uint32_t owner_uid,
                     std::uint32_t owner_gid, const std::string& label);
void mount_ext4_image(const std::filesystem::path& image, const std::filesystem::path& dir);
// Moves every owner in [from, from + 65536) under `dir` to the same offset
// from `to`, never following a link nor leaving the file system.
void remap_owners(const std::filesystem::path& dir, std::uint32_t from, std::uint32_t to);

// Copies what an image holds under its /workspace (`from`, a template's
// files) into a new workspace at `to`, its owners moved into the
// workspace's range (host_id_base + the image's id); the workspace's root
// keeps its own. A launch_error when it does not fit.
void copy_image_workspace(const std::filesystem::path& from, const std::filesystem::path& to, std::uint32_t host_id_base);

class workspace_store {
public:
    workspace_store(std::filesystem::path root, std::uint32_t id_base, std::uint32_t max_slots);

    // Mounts (creating if needed) the workspace at `dir`, owned by container
    // uid/gid `uid`/`gid` mapped through its slot.
    // With `seed`, a new workspace is a copy of its image (of its size).
    workspace ensure(const std::filesystem::path& dir, std::uint64_t bytes, std::uint32_t uid,
                     std::uint32_t gid, const workspace_seed* seed = nullptr);
    // A consistent copy of the workspace at `dir` (mounted or not) to
    // `to`, while a sandbox may be writing to it: the file system is frozen
    // (its writers wait) for the length of the copy.
    image_copy copy_image(const std::filesystem::path& dir, const std::filesystem::path& to);
    // The host id base of the workspace at `dir` (its slot, claimed if it had none).
    std::uint32_t host_id_base(const std::filesystem::path& dir);
    // Unmounts and deletes the workspace and frees its slot. Missing is fine.
    void remove(const std::filesystem::path& dir);
    // Frees slots whose workspace no longer exists; returns how many.
    int reap_slots();

    const std::filesystem::path& root() const noexcept { return root_; }

private:
    std::uint32_t claim_slot(const std::string& name);
    std::filesystem::path slots_dir() const { return root_ / ".slots"; }

    std::filesystem::path root_;
    std::uint32_t id_base_;
    std::uint32_t max_slots_;
};

}  // namespace cellgate::launcher
