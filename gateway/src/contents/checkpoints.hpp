#pragma once

// Jupyter's file checkpoints, kept where jupyter_server keeps them:
// "<dir>/.ipynb_checkpoints/<stem>-checkpoint<ext>" beside the file, inside
// the kernel's workspace. So the workspace cap bounds them (a checkpoint the
// workspace has no room for fails with no_space), they go with the workspace,
// and the kernel sees them as Jupyter users expect. Copies stream through
// contents_store::copy (never the whole file in memory) into a temporary
// name and replace the old checkpoint or file only once complete.

#include "contents/contents_store.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace cellgate::contents {

inline constexpr std::string_view checkpoint_dir_name = ".ipynb_checkpoints";

// Where the checkpoint of `file` lives; bad_path if that name would be too long.
std::string checkpoint_path(std::string_view file);

// The checkpoint of `file`, if there is one (a regular file).
std::optional<entry_info> find_checkpoint(const contents_store& store, std::string_view file);
// Copies `file` to its checkpoint, replacing the previous one.
entry_info create_checkpoint(contents_store& store, std::string_view file);
// Copies the checkpoint back over `file`; not_found without one.
void restore_checkpoint(contents_store& store, std::string_view file);
// Removes the checkpoint of `file`; false when there was none.
bool delete_checkpoint(contents_store& store, std::string_view file);
// After `from` was renamed to `to`: its checkpoint follows, replacing one at `to`.
void move_checkpoint(contents_store& store, std::string_view from, std::string_view to);

}  // namespace cellgate::contents
