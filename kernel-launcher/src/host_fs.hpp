#pragma once

#include "cellgate/launcher/unique_fd.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cellgate::launcher {

// Small host filesystem operations the launcher is built from. Each throws
// launch_error naming `step` and errno on failure.

bool is_mount_point(const std::filesystem::path& path);
// Mount points at or below `prefix`, deepest first.
std::vector<std::string> mounts_under(const std::filesystem::path& prefix);

void mount_tmpfs(const std::string& step, const std::filesystem::path& where, std::uint64_t bytes,
                 unsigned mode);
// Detaches the mount (lazily, so a busy mount cannot fail a teardown). Not
// mounted is fine.
void unmount(const std::string& step, const std::filesystem::path& where);

void make_dir(const std::string& step, const std::filesystem::path& path, unsigned mode,
              bool must_not_exist = false);
// Owner and mode of `path` itself, never of what a symlink there points at:
// the name is opened once (O_PATH | O_NOFOLLOW) and the type check, chown and
// chmod all go through that descriptor, so a name swapped for a symlink
// between a check and a change (review L3: under gVisor the relay owns the
// directory its sockets sit in) changes nothing else. `type` is the S_IFMT
// kind the file must be (S_IFSOCK, S_IFDIR, …), or 0 for any but a symlink;
// kNoChange as uid or gid keeps it.
inline constexpr std::uint32_t kNoChange = static_cast<std::uint32_t>(-1);
void change_owner(const std::string& step, const std::filesystem::path& path, std::uint32_t uid,
                  std::uint32_t gid, unsigned mode, unsigned type = 0);
// Creates `path` (O_EXCL) with `content`, owner and mode; durable enough for /run.
void write_file(const std::string& step, const std::filesystem::path& path,
                const std::string& content, unsigned mode, std::uint32_t uid = 0,
                std::uint32_t gid = 0);
std::string read_file(const std::filesystem::path& path, std::size_t max_bytes = 1 << 20);

// Throws launch_error(step, EACCES) naming the first directory above `path`
// that other users cannot search (gVisor's gofer opens mount sources as the
// sandbox's mapped root, not as host root).
void require_searchable_by_others(const std::string& step, const std::filesystem::path& path);
std::string read_tail(const std::filesystem::path& path, std::size_t max_bytes);
// `text` hashed to `hex_digits` (at most 16) lowercase hex digits (FNV-1a): a
// short file name standing for a longer one, not a secret.
std::string name_hash(const std::string& text, int hex_digits);

// A pidfd for `pid` (-1 and errno when it is gone).
int pidfd_open(std::int64_t pid);
// The sandbox's kernel.log in its run dir, for appending (made if missing):
// the container's stdout and stderr, or a forked kernel's.
unique_fd open_kernel_log(const std::string& step, const std::filesystem::path& run_dir);

}  // namespace cellgate::launcher
