// What a cell touched and what it cost (execution.hpp): the workspace
// snapshots before and after it, the files it created, modified or deleted
// (inline for a one-shot run), and its record in the ledger.
#include "agent/execution.hpp"

#include "util/encoding.hpp"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

namespace cellgate::agent {

using nlohmann::json;

namespace {

std::string sha256_hex(std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_Digest(data.data(), data.size(), out, &len, EVP_sha256(), nullptr);
    return hex_encode(std::string_view(reinterpret_cast<const char*>(out), len));
}

}  // namespace

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
              {"code_sha256", sha256_hex(options_.code)},
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
    if (usage_before_ && after) {
        // CPU of every task in the sandbox's cgroup during the cell (the
        // kernel, its threads and children; gVisor's sentry too under runsc).
        if (after->cpu_ns >= usage_before_->cpu_ns)
            r["cpu_s"] = static_cast<double>(after->cpu_ns - usage_before_->cpu_ns) / 1e9;
        // The peak is the cgroup's (the kernel's baseline, page cache and
        // all); its rise above the use at the cell's start is what the cell added.
        if (usage_before_->peak_resettable) {
            r["peak_memory_bytes"] = after->memory_peak_bytes;
            r["peak_memory_increase_bytes"] =
                after->memory_peak_bytes > usage_before_->memory_bytes ? after->memory_peak_bytes - usage_before_->memory_bytes : 0;
        }
        r["memory_bytes_at_start"] = usage_before_->memory_bytes;
        r["memory_bytes_at_end"] = after->memory_bytes;
    }
    return r;
}

}  // namespace cellgate::agent
