// What a cell touched and what it cost (execution.hpp): the workspace
// snapshots before and after it, the files it created, modified or deleted
// (inline for a one-shot run), and its record in the ledger.
#include "agent/execution.hpp"
#include "agent/ledger.hpp"

#include "util/encoding.hpp"

#include <spdlog/spdlog.h>

namespace cellgate::agent {

using nlohmann::json;

std::optional<workspace_snapshot> execution::take_snapshot() const {
    const auto sb = kernel_->sandbox();
    if (!sb) return std::nullopt;
    try {
        contents::contents_store store(sb->workspace_dir, sb->host_uid_base + sb->spec.uid,
                                       sb->host_uid_base + sb->spec.gid);
        return workspace_snapshot::take(store);
    } catch (const std::exception& e) {
        spdlog::warn("kernel {}: workspace snapshot failed: {}", kernel_->id(), e.what());
        return std::nullopt;
    }
}

json execution::collect_files() {
    json files = json::array();
    if (!before_) return files;
    const auto sb = kernel_->sandbox();
    if (!sb) return files;
    try {
        contents::contents_store store(sb->workspace_dir, sb->host_uid_base + sb->spec.uid,
                                       sb->host_uid_base + sb->spec.gid);
        const auto after = workspace_snapshot::take(store);
        files_truncated_ = !after.complete || !before_->complete;
        const auto changes = diff(*before_, after);
        for (const auto& [path, e] : before_->files)
            if (after.files.count(path) == 0) deleted_.push_back({{"path", path}, {"size", e.size}});
        std::vector<std::optional<std::string>> contents;
        if (options_.inline_files) contents = read_inline(store, changes, options_.inline_files_limit_bytes);
        for (std::size_t i = 0; i < changes.size(); ++i) {
            const auto& c = changes[i];
            json f = {{"path", c.path},
                      {"size", c.size},
                      {"mime_type", std::string(contents::mime_type_for(c.path))},
                      {"change", c.change}};
            // Over the limit or unreadable: listed, not inlined.
            if (options_.inline_files) f["content_base64"] = contents[i] ? json(base64_encode(*contents[i])) : json(nullptr);
            files.push_back(std::move(f));
        }
    } catch (const std::exception& e) {
        spdlog::warn("kernel {}: listing changed files failed: {}", kernel_->id(), e.what());
    }
    return files;
}

// The cell's record in the ledger: what it cost and touched.
json execution::usage_record(const std::string& status, const json& files,
                             const std::optional<launcher::sandbox_usage>& after) const {
    const auto ended = std::chrono::system_clock::now();
    json created = json::array(), modified = json::array();
    for (const auto& f : files)
        (f.value("change", "") == "created" ? created : modified).push_back({{"path", f["path"]}, {"size", f["size"]}});
    json r = {{"execution_id", id_},
              {"session_id", kernel_->id()},
              {"code_sha256", code_sha256(options_.code)},
              {"code_bytes", options_.code.size()},
              {"started_at", kernels::iso8601(started_wall_)},
              {"ended_at", kernels::iso8601(ended)},
              {"wall_ms", std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_).count()},
              {"status", status},
              {"cpu_s", nullptr},
              {"peak_memory_bytes", nullptr},
              {"stdout_bytes", options_.budget_bytes > 0 ? captures_[0].total_bytes() : stdout_.size()},
              {"stderr_bytes", options_.budget_bytes > 0 ? captures_[1].total_bytes() : stderr_.size()},
              {"result_bytes", admission_.results.bytes()},
              {"results", results_.size()},
              {"files", {{"created", std::move(created)}, {"modified", std::move(modified)}, {"deleted", deleted_}}},
              {"files_complete", !files_truncated_},
              {"egress", json::array()}};
    record_usage(r, usage_before_, after);
    return r;
}

}  // namespace cellgate::agent
