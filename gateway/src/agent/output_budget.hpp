#pragma once

// Output sized for a model's context: what an execution with a budget
// (max_output_tokens or max_output_bytes) keeps of its text, and how. Pure
// functions, shared by the agent API's results and the MCP tools' rendering.
//
//   - text keeps its head and its tail around a marker that says how much
//     went (and, with a handle, where to read it all);
//   - the parts of one result (stdout, stderr, the error, each result's
//     text) share the budget: a part that needs less than an equal share
//     keeps all of it, the others split the rest;
//   - repeated traceback frames collapse into one and a count;
//   - a DataFrame's display becomes its shape, columns and first rows;
//   - images are measured from their headers (never decoded here).

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cellgate::agent {

// The token estimate: 4 bytes of UTF-8 per token (docs/agent-api.md says why).
inline constexpr std::size_t bytes_per_token = 4;
// Room a marker line takes, reserved inside each part's share.
inline constexpr std::size_t marker_room = 160;

// How each part's share of `budget` is set (same order as `sizes`).
std::vector<std::size_t> share_budget(const std::vector<std::size_t>& sizes, std::size_t budget);

// `text` cut to at most `budget` bytes: head and tail, whole UTF-8 sequences,
// around "… N bytes (M lines) elided<where> …". Unchanged when it fits; a
// budget too small for the marker keeps only the head (the budget is a
// ceiling, whatever the share).
std::string head_and_tail(std::string_view text, std::size_t budget, std::string_view where = {});

// A stream kept in pieces: its first `keep` bytes, its last `keep` bytes, and
// how much and how many lines there were in all. Enough to render it within
// any budget up to `keep` without holding it whole.
class text_capture {
public:
    explicit text_capture(std::size_t keep = 0) : keep_(keep) {}
    void append(std::string_view piece);
    std::uint64_t total_bytes() const noexcept { return total_; }
    bool whole() const noexcept { return total_ == head_.size(); }
    // As head_and_tail would cut the whole text.
    std::string render(std::size_t budget, std::string_view where = {}) const;

private:
    std::size_t keep_;
    std::string head_, tail_;
    std::uint64_t total_ = 0, lines_ = 0;
};

// Consecutive identical frames (ANSI colours aside) become one frame and a
// line saying how often it repeated.
nlohmann::json collapse_frames(const nlohmann::json& traceback);

// Width and height from a PNG's IHDR or a JPEG's SOF marker.
std::optional<std::pair<std::uint32_t, std::uint32_t>> image_size(std::string_view bytes);

// A DataFrame or Series summary (the kernel's application/vnd.cellgate.table+json)
// as text: kind, shape, columns with dtypes, the first rows.
std::string table_summary(const nlohmann::json& table);

inline constexpr std::string_view table_mime_type = "application/vnd.cellgate.table+json";

// Removes ANSI colour and cursor sequences (for traceback_text).
std::string strip_ansi(std::string_view text);

}  // namespace cellgate::agent
