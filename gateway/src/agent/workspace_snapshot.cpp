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
        if (seen >= max_entries) {
            snap.complete = false;
            return;
        }
        contents::listing entries;
        try {
            // Only what the budget still allows is read and stat'ed.
            entries = store.list(dir, max_entries - seen);
        } catch (const contents::contents_error&) {
            snap.complete = false;  // vanished or unreadable meanwhile
            return;
        }
        if (entries.truncated) snap.complete = false;
        seen += entries.entries.size();
        for (const auto& e : entries.entries) {
            if (e.type == contents::entry_type::directory) walk(e.path, depth + 1);
            else if (e.writable) snap.files[e.path] = {e.size, e.mtime_ns};  // links and special files are skipped
        }
    };
    walk("", 0);
    return snap;
}

std::vector<std::optional<std::string>> read_inline(const contents::contents_store& store,
                                                    const std::vector<file_change>& changes, std::size_t limit_bytes) {
    std::vector<std::optional<std::string>> out;
    out.reserve(changes.size());
    std::size_t used = 0;
    for (const auto& c : changes) {
        // The sizes are from the snapshot; the kernel may have grown the
        // files since, so each read is capped by what is left of the budget
        // and what was really read is counted.
        const auto left = limit_bytes - used;
        if (c.size > left) {
            out.emplace_back();
            continue;
        }
        try {
            auto data = store.read(c.path, left);
            used += data.size();
            out.emplace_back(std::move(data));
        } catch (const contents::contents_error&) {
            out.emplace_back();  // grew past the budget, or gone
        }
    }
    return out;
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
