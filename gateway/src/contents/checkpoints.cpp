#include "contents/checkpoints.hpp"

namespace cellgate::contents {

namespace {

std::string parent_of(const std::string& rel) {
    const auto slash = rel.rfind('/');
    return slash == std::string::npos ? std::string() : rel.substr(0, slash);
}

std::string join(const std::string& dir, std::string_view name) {
    return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

// Copies `from` to a fresh hidden name in `to`'s directory, then renames it
// over `to`: a copy that fails (the workspace is full) leaves `to` as it was.
void copy_over(contents_store& store, const std::string& from, const std::string& to) {
    const auto dir = parent_of(to);
    const auto temp = join(dir, store.untitled_name(dir, ".cellgate-copy", ""));
    store.copy(from, temp);
    try {
        store.rename(temp, to, true);
    } catch (const contents_error&) {
        try {
            store.remove(temp);
        } catch (const contents_error&) {
        }
        throw;
    }
}

}  // namespace

std::string checkpoint_path(std::string_view file) {
    const std::string rel = contents_store::check_path(file);
    const auto slash = rel.rfind('/');
    const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    // As os.path.splitext, which jupyter_server uses: leading dots start no extension.
    auto dot = name.rfind('.');
    if (dot != std::string::npos && name.find_first_not_of('.') > dot) dot = std::string::npos;
    const std::string stem = dot == std::string::npos ? name : name.substr(0, dot);
    const std::string ext = dot == std::string::npos ? std::string() : name.substr(dot);
    const auto dir = join(parent_of(rel), checkpoint_dir_name);
    return contents_store::check_path(join(dir, stem + "-checkpoint" + ext));
}

std::optional<entry_info> find_checkpoint(const contents_store& store, std::string_view file) {
    const auto path = checkpoint_path(file);
    if (!store.exists(path)) return std::nullopt;
    try {
        auto e = store.stat(path);
        if (e.type == entry_type::file) return e;
    } catch (const contents_error& e) {
        if (e.kind() != error_kind::not_found && e.kind() != error_kind::forbidden) throw;
    }
    return std::nullopt;  // the kernel put something else there
}

entry_info create_checkpoint(contents_store& store, std::string_view file) {
    const auto rel = contents_store::check_path(file);
    const auto path = checkpoint_path(rel);
    if (store.stat(rel).type == entry_type::directory)
        throw contents_error(error_kind::conflict, "cannot checkpoint a directory");
    store.make_parents(path);
    copy_over(store, rel, path);
    return store.stat(path);
}

void restore_checkpoint(contents_store& store, std::string_view file) {
    const auto rel = contents_store::check_path(file);
    if (!find_checkpoint(store, rel)) throw contents_error(error_kind::not_found, "no such checkpoint");
    copy_over(store, checkpoint_path(rel), rel);
}

bool delete_checkpoint(contents_store& store, std::string_view file) {
    if (!find_checkpoint(store, file)) return false;
    store.remove(checkpoint_path(file));
    return true;
}

void move_checkpoint(contents_store& store, std::string_view from, std::string_view to) {
    if (!find_checkpoint(store, from)) return;
    const auto target = checkpoint_path(to);
    store.make_parents(target);
    store.rename(checkpoint_path(from), target, true);
}

}  // namespace cellgate::contents
