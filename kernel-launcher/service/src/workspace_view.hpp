#pragma once

#include <sys/types.h>

#include <filesystem>

namespace cellgate::launcher::service {

// An id-mapped view of a sandbox's workspace for the unprivileged gateway.
// Files the kernel owns (host uid `kernel_uid`) appear there as the
// gateway's; what the gateway creates lands on disk as the kernel's. Nothing
// else in the workspace maps, and the view is nosuid, nodev, noexec.
// Throws std::system_error on failure.
void make_workspace_view(const std::filesystem::path& workspace, const std::filesystem::path& view, uid_t kernel_uid,
                         gid_t kernel_gid, uid_t client_uid, gid_t client_gid);
// Detaches and removes the view; quiet when there is none.
void remove_workspace_view(const std::filesystem::path& view) noexcept;

}  // namespace cellgate::launcher::service
