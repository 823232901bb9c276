#pragma once

// The MCP tools' fixed surface and how their results read to a model: the
// tool list (names and input schemas agents and docs rely on), and an
// execution's result as MCP content — one text block, one image block per
// PNG/JPEG display, one resource_link per file the cell made or changed.
// Pure functions of their inputs, so the unit tests pin them.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cellgate::mcp {

// Budgets are given in tokens and measured in bytes: agent::bytes_per_token.

struct render_limits {
    std::size_t text_bytes = 24u << 10;      // stdout + stderr + result + error in the text block
    std::size_t max_images = 8;
    std::size_t max_image_bytes = 2u << 20;  // decoded, per image
    std::size_t max_images_total = 8u << 20; // base64, all images of one result
};

// The tools, in a fixed order (tools/list's result "tools").
nlohmann::json tool_list(long default_timeout_s, long max_timeout_s);
bool is_tool(std::string_view name) noexcept;

// Checks `args` against the named tool's schema: required members present,
// types right, no unknown members. Returns what is wrong, or "".
std::string check_arguments(std::string_view tool, const nlohmann::json& args);

// A tool result: `text` as the only block.
nlohmann::json text_result(const std::string& text, bool is_error = false);

// The URI of a workspace file as an MCP resource, and back (nullopt when
// `uri` is not one of ours; the path is %-decoded, not yet checked).
std::string file_uri(const std::string& session_id, std::string_view path);
struct file_ref {
    std::string session_id, path;
};
std::optional<file_ref> parse_file_uri(std::string_view uri);

// An /v1 execution result as a tools/call result. `new_session` adds the
// line that tells the model to pass the id on.
nlohmann::json render_execution(const nlohmann::json& result, const std::string& session_id, bool new_session,
                                const render_limits& limits);

}  // namespace cellgate::mcp
