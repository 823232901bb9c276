#pragma once

// What the agent API keeps of a cell's rich results (display_data,
// execute_result) and what that costs against the execution's cap. Counted
// on the kernel's delivery path, before anything is queued, from the raw
// message text: the whole kept result (its data in the kept MIME types, its
// metadata, its execution count) as serialized, plus a fixed overhead for the
// gateway's own bookkeeping of each result, so that neither large metadata
// nor many tiny displays get past the cap.

#include "messaging/json_peek.hpp"

#include <array>
#include <cstddef>
#include <string_view>

namespace cellgate::agent {

// The last one is the kernel image's DataFrame summary: used by executions
// with an output budget, removed from every result.
inline constexpr std::array<std::string_view, 13> kept_mime_types = {
    "text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/svg+xml",
    "application/json", "application/pdf", "application/javascript", "e2b/data", "e2b/chart",
    "application/vnd.cellgate.table+json"};

// A one-line display costs about 1.6 KB of gateway memory from its arrival to
// the end of its response (its JSON nodes, their copy in the result, its text
// in the body), against some 30 bytes of data.
inline constexpr std::size_t result_overhead_bytes = 1024;

// Views into one display_data / execute_result content: the raw JSON of each
// kept MIME type's value (empty when absent), of the metadata and of the
// execution count (empty when absent), and the result's cost.
struct result_parts {
    std::array<std::string_view, kept_mime_types.size()> data{};
    std::string_view metadata;
    std::string_view execution_count;
    std::size_t cost_bytes = 0;
};

inline result_parts peek_result(std::string_view content) {
    namespace peek = messaging::json_peek;
    result_parts p;
    if (const auto data = peek::member(content, "data"); data && !data->empty() && data->front() == '{') {
        const bool ok = peek::for_each_member(*data, [&p](std::string_view key, std::string_view value) {
            for (std::size_t i = 0; i < kept_mime_types.size(); ++i)
                if (peek::key_is(key, kept_mime_types[i])) p.data[i] = value;  // the last one wins, as in a parse
            return true;
        });
        if (!ok) p.data = {};
    }
    p.metadata = peek::member(content, "metadata").value_or(std::string_view{});
    p.execution_count = peek::member(content, "execution_count").value_or(std::string_view{});
    // As serialized: {"text/plain":<value>,...}, the metadata ({} when absent)
    // and the execution count.
    std::size_t data_bytes = 2, members = 0;
    for (std::size_t i = 0; i < p.data.size(); ++i) {
        if (p.data[i].empty()) continue;
        data_bytes += (members++ > 0 ? 1 : 0) + kept_mime_types[i].size() + 3 + p.data[i].size();
    }
    p.cost_bytes = result_overhead_bytes + data_bytes + (p.metadata.empty() ? 2 : p.metadata.size()) +
                   p.execution_count.size();
    return p;
}

// The cap on an execution's rich results, in bytes (cost_bytes) and in
// number. Results are admitted in arrival order; once one does not fit, none
// after it is (the kept results are a prefix of what the cell displayed).
class results_budget {
public:
    results_budget(std::size_t limit_bytes, std::size_t max_results) noexcept
        : limit_bytes_(limit_bytes), max_results_(max_results) {}

    bool admit(std::size_t cost_bytes) noexcept {
        if (truncated_ || count_ >= max_results_ || cost_bytes > limit_bytes_ - bytes_) {
            truncated_ = true;
            return false;
        }
        bytes_ += cost_bytes;
        ++count_;
        return true;
    }
    bool truncated() const noexcept { return truncated_; }
    std::size_t bytes() const noexcept { return bytes_; }
    std::size_t count() const noexcept { return count_; }

private:
    std::size_t limit_bytes_, max_results_;
    std::size_t bytes_ = 0, count_ = 0;
    bool truncated_ = false;
};

}  // namespace cellgate::agent
