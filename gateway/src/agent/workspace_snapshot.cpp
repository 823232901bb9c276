#include "agent/workspace_snapshot.hpp"

#include <functional>

namespace cellgate::agent {

workspace_snapshot workspace_snapshot::take(const contents::contents_store& store, std::size_t max_entries,
                                            int max_depth) {
    workspace_snapshot snap;
    std::size_t seen = 0;
    std::function<void(const std::string&, int)> walk = [&](const std::string& dir, int depth) {
        if (depth > max_depth) {
            snap.complete = false;
            return;
        }
        std::vector<contents::entry_info> entries;
        try {
            entries = store.list(dir);
        } catch (const contents::contents_error&) {
            snap.complete = false;  // vanished or unreadable meanwhile
            return;
        }
        for (const auto& e : entries) {
            if (++seen > max_entries) {
                snap.complete = false;
                return;
            }
            if (e.type == contents::entry_type::directory) walk(e.path, depth + 1);
            else if (e.writable) snap.files[e.path] = {e.size, e.mtime_ns};  // links and special files are skipped
        }
    };
    walk("", 0);
    return snap;
}

std::vector<file_change> diff(const workspace_snapshot& before, const workspace_snapshot& after) {
    std::vector<file_change> out;
    for (const auto& [path, e] : after.files) {
        const auto it = before.files.find(path);
        if (it == before.files.end()) out.push_back({path, e.size, "created"});
        else if (it->second.size != e.size || it->second.mtime_ns != e.mtime_ns) out.push_back({path, e.size, "modified"});
    }
    return out;
}

}  // namespace cellgate::agent
