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

class workspace_store {
public:
    workspace_store(std::filesystem::path root, std::uint32_t id_base, std::uint32_t max_slots);

    // Mounts (creating if needed) the workspace at `dir`, owned by container
    // uid/gid `uid`/`gid` mapped through its slot.
    workspace ensure(const std::filesystem::path& dir, std::uint64_t bytes, std::uint32_t uid,
                     std::uint32_t gid);
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
