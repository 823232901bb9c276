#include "mcp/tools.hpp"

#include "agent/output_budget.hpp"
#include "http/http_types.hpp"
#include "util/encoding.hpp"

#include <algorithm>
#include <limits>
#include <cstdio>
#include <array>
#include <numeric>
#include <vector>

namespace cellgate::mcp {

using nlohmann::json;

namespace {

constexpr std::string_view uri_prefix = "cellgate://sessions/";

const json& session_id_schema() {
    static const json s = {{"type", "string"},
                           {"description", "A session handle from an earlier result (execute_code, create_session, "
                                           "list_sessions)."}};
    return s;
}

json schema(json properties, std::vector<std::string> required) {
    json s = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
    if (!required.empty()) s["required"] = required;
    return s;
}

json annotations(bool read_only, bool destructive, bool idempotent) {
    return {{"readOnlyHint", read_only},
            {"destructiveHint", destructive},
            {"idempotentHint", idempotent},
            {"openWorldHint", false}};
}

json tools_json(long default_timeout_s, long max_timeout_s) {
    const json timeout = {{"type", "integer"},
                          {"minimum", 1},
                          {"maximum", max_timeout_s},
                          {"description", "Seconds before the cell is interrupted (default " +
                                              std::to_string(default_timeout_s) +
                                              "). Raise it only if your client allows tool calls that long."}};
    json list = json::array();
    list.push_back(
        {{"name", "execute_code"},
         {"title", "Run code"},
         {"description",
          "Runs code (Python unless language says otherwise) in a stateful Jupyter kernel inside an isolated "
          "sandbox and returns its status, stdout, "
          "stderr, main result, error with traceback, and the files it created or changed. Variables, imports and "
          "files persist between calls that pass the same session_id; without session_id a new session is made and "
          "its id is in the result: pass it to every later call. numpy, pandas, matplotlib and scipy are installed; "
          "there is no network access. Plots are returned as images (also savefig them under the working directory "
          "to keep them as files). Long outputs are cut to head and tail."},
         {"inputSchema",
          schema({{"code", {{"type", "string"}, {"description", "Source to run as one cell."}}},
                  {"language",
                   {{"type", "string"},
                    {"enum", {"python", "r", "javascript", "typescript", "bash"}},
                    {"description", "The kernel's language (default python). A new session runs that language's "
                                    "kernel; a session_id must be a session of the same language. R has "
                                    "ggplot2, dplyr and data.table; JavaScript and TypeScript run on Deno."}}},
                  {"session_id", session_id_schema()},
                  {"timeout_s", timeout},
                  {"max_output_tokens",
                   {{"type", "integer"},
                    {"minimum", 64},
                    {"description", "Budget for the text of the result, in tokens (about 4 bytes each); the middle "
                                    "of longer output is elided. Default about 6,000."}}}},
                 {"code"})},
         {"annotations", annotations(false, true, false)}});
    list.push_back(
        {{"name", "create_session"},
         {"title", "Start a session"},
         {"description", "Starts a new sandboxed kernel session and returns its session_id and limits. execute_code "
                         "without a session_id does the same implicitly."},
         {"inputSchema",
          schema({{"kernel", {{"type", "string"}, {"description", "Kernelspec name (default: the server's default)."}}},
                  {"template",
                   {{"type", "string"},
                    {"description", "One of your templates, name or name:tag (built with POST /v1/templates or "
                                    "E2B's Template.build): its packages and files are there (do not pass kernel "
                                    "with it)."}}},
                  {"timeout_s", {{"type", "integer"}, {"minimum", 1}, {"description", "Default per-cell time limit, seconds."}}},
                  {"idle_timeout_s", {{"type", "integer"}, {"minimum", 0}, {"description", "Seconds idle before the session ends."}}},
                  {"lifetime_s", {{"type", "integer"}, {"minimum", 0}, {"description", "Seconds before the session ends, busy or not."}}},
                  {"from_snapshot",
                   {{"type", "string"},
                    {"description", "A snapshot id (snapshot_session): the new session starts with a copy of its "
                                    "files, and runs the kernel its source ran (do not pass kernel with it)."}}}},
                 {})},
         {"annotations", annotations(false, false, false)}});
    list.push_back(
        {{"name", "snapshot_session"},
         {"title", "Snapshot a session's files"},
         {"description", "Keeps an immutable copy of a session's files under a snapshot id, while the session goes "
                         "on. Start any number of sessions from it later (create_session with from_snapshot): each "
                         "gets its own copy. Variables are not kept, only files: save what you need to a file "
                         "first (e.g. with pickle). The snapshot outlives the session."},
         {"inputSchema",
          schema({{"session_id", session_id_schema()},
                  {"name", {{"type", "string"}, {"maxLength", 128}, {"description", "A name to find it by."}}}},
                 {"session_id"})},
         {"annotations", annotations(false, false, false)}});
    list.push_back(
        {{"name", "fork_session"},
         {"title", "Fork a session"},
         {"description", "Copies a session's files into `count` new sessions, to try several approaches from the same "
                         "point without them affecting each other or the original. Returns the new session_ids. "
                         "Variables are not carried over, only files: save what you need to a file first."},
         {"inputSchema",
          schema({{"session_id", session_id_schema()},
                  {"count", {{"type", "integer"}, {"minimum", 1}, {"maximum", 16}, {"description", "How many new sessions (default 1)."}}}},
                 {"session_id"})},
         {"annotations", annotations(false, false, false)}});
    list.push_back({{"name", "close_session"},
                    {"title", "End a session"},
                    {"description", "Ends a session: its kernel stops and its files are deleted."},
                    {"inputSchema", schema({{"session_id", session_id_schema()}}, {"session_id"})},
                    {"annotations", annotations(false, true, true)}});
    list.push_back({{"name", "list_sessions"},
                    {"title", "List sessions"},
                    {"description", "Lists your open sessions (id, kernel, state, creation and last activity), for "
                                    "finding a session_id again."},
                    {"inputSchema", schema(json::object(), {})},
                    {"annotations", annotations(true, false, true)}});
    list.push_back(
        {{"name", "write_file"},
         {"title", "Write a file"},
         {"description", "Writes a file into a session's working directory (the kernel's current directory), making "
                         "parent directories. Without session_id a new session is made. Binary content goes as base64."},
         {"inputSchema",
          schema({{"session_id", session_id_schema()},
                  {"path", {{"type", "string"}, {"description", "Path relative to the working directory."}}},
                  {"content", {{"type", "string"}, {"description", "The file's content, as text or base64."}}},
                  {"encoding", {{"type", "string"}, {"enum", {"utf-8", "base64"}}, {"default", "utf-8"}}}},
                 {"path", "content"})},
         {"annotations", annotations(false, true, true)}});
    list.push_back(
        {{"name", "read_file"},
         {"title", "Read a file"},
         {"description", "Reads a file from a session's working directory: text as text (cut past max_bytes), "
                         "PNG/JPEG/GIF/WebP as an image, anything else as a summary and a resource link."},
         {"inputSchema",
          schema({{"session_id", session_id_schema()},
                  {"path", {{"type", "string"}, {"description", "Path relative to the working directory."}}},
                  {"max_bytes", {{"type", "integer"}, {"minimum", 1}, {"description", "Most text to return (default 65536)."}}}},
                 {"session_id", "path"})},
         {"annotations", annotations(true, false, true)}});
    list.push_back({{"name", "list_files"},
                    {"title", "List files"},
                    {"description", "Lists a directory of a session's working directory: name, type, size, modified."},
                    {"inputSchema",
                     schema({{"session_id", session_id_schema()},
                             {"path", {{"type", "string"}, {"description", "Directory relative to the working directory (default: the top)."}}}},
                            {"session_id"})},
                    {"annotations", annotations(true, false, true)}});
    return list;
}

const json& tool_table() {
    // The schemas' shapes, for checking arguments; the cell timeout's ceiling
    // is the server's own (checked where the cell is made), not this one.
    static const json t = tools_json(50, std::numeric_limits<int>::max());
    return t;
}

const json* find_tool(std::string_view name) {
    for (const auto& t : tool_table())
        if (t["name"].get<std::string>() == name) return &t;
    return nullptr;
}

std::string check_member(const std::string& name, const json& rule, const json& value) {
    const auto type = rule.value("type", "");
    if (type == "string") {
        if (!value.is_string()) return "'" + name + "' must be a string";
        if (rule.contains("enum")) {
            const auto& allowed = rule["enum"];
            if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
                return "'" + name + "' must be one of " + allowed.dump();
        }
        if (rule.contains("maxLength") && value.get_ref<const std::string&>().size() > rule["maxLength"].get<std::size_t>())
            return "'" + name + "' must be at most " + rule["maxLength"].dump() + " bytes";
    } else if (type == "integer") {
        if (!value.is_number_integer()) return "'" + name + "' must be a whole number";
        const auto v = value.get<long long>();
        if (rule.contains("minimum") && v < rule["minimum"].get<long long>())
            return "'" + name + "' must be at least " + rule["minimum"].dump();
        if (rule.contains("maximum") && v > rule["maximum"].get<long long>())
            return "'" + name + "' must be at most " + rule["maximum"].dump();
    }
    return "";
}

std::string text_of_bundle(const json& data, bool with_html_fallback) {
    if (!data.is_object()) return "";
    for (const char* mime : {"text/markdown", "text/plain", "text/latex"})
        if (data.contains(mime) && data[mime].is_string()) return data[mime].get<std::string>();
    if (data.contains("application/json")) return data["application/json"].dump(2);
    if (with_html_fallback && data.contains("text/html") && data["text/html"].is_string())
        return data["text/html"].get<std::string>();
    return "";
}

std::string strip_whitespace(std::string s) {
    s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return c == '\n' || c == '\r' || c == ' ' || c == '\t'; }),
            s.end());
    return s;
}

struct section {
    std::string title, text;
};

}  // namespace

json tool_list(long default_timeout_s, long max_timeout_s) { return tools_json(default_timeout_s, max_timeout_s); }

bool is_tool(std::string_view name) noexcept { return find_tool(name) != nullptr; }

std::string check_arguments(std::string_view tool, const json& args) {
    const auto* t = find_tool(tool);
    if (t == nullptr) return "unknown tool";
    if (!args.is_object()) return "the arguments must be an object";
    const auto& s = (*t)["inputSchema"];
    const auto& props = s["properties"];
    for (const auto& [name, value] : args.items()) {
        if (!props.contains(name)) return "unknown argument '" + name.substr(0, 64) + "' (this tool takes " +
                                          [&] {
                                              std::string names;
                                              for (const auto& [n, _] : props.items()) names += (names.empty() ? "" : ", ") + n;
                                              return names.empty() ? std::string("none") : names;
                                          }() + ")";
        if (value.is_null()) continue;  // as absent
        if (auto why = check_member(name, props[name], value); !why.empty()) return why;
    }
    if (s.contains("required"))
        for (const auto& r : s["required"]) {
            const auto n = r.get<std::string>();
            if (!args.contains(n) || args[n].is_null()) return "'" + n + "' is required";
        }
    return "";
}

json text_result(const std::string& text, bool is_error) {
    json r = {{"content", json::array({{{"type", "text"}, {"text", text}}})}};
    if (is_error) r["isError"] = true;
    return r;
}

std::string file_uri(const std::string& session_id, std::string_view path) {
    return std::string(uri_prefix) + session_id + "/files/" + url_encode_path(path);
}

std::optional<file_ref> parse_file_uri(std::string_view uri) {
    if (!uri.starts_with(uri_prefix)) return std::nullopt;
    uri.remove_prefix(uri_prefix.size());
    const auto slash = uri.find("/files/");
    if (slash == std::string_view::npos || slash == 0) return std::nullopt;
    const auto id = http::url_decode(uri.substr(0, slash));
    const auto path = http::url_decode(uri.substr(slash + 7));
    if (!id || !path || id->find('/') != std::string::npos) return std::nullopt;
    return file_ref{*id, *path};
}

json render_execution(const json& result, const std::string& session_id, bool new_session, const render_limits& limits) {
    const auto status = result.value("status", "error");
    std::string head = "status: " + status + "\nsession_id: " + session_id;
    if (new_session) head += " (a new session: pass this session_id to later calls to keep variables and files)";
    head += "\n";
    if (result.contains("execution_count") && result["execution_count"].is_number())
        head += "execution_count: " + result["execution_count"].dump() + "\n";
    head += "duration_ms: " + result.value("duration_ms", json(0)).dump() + "\n";
    if (const auto& u = result.contains("usage") ? result["usage"] : json(nullptr); u.is_object()) {
        std::string line;
        if (u.contains("cpu_s") && u["cpu_s"].is_number()) {
            char cpu[32];
            std::snprintf(cpu, sizeof cpu, "%.2f", u["cpu_s"].get<double>());
            line += std::string("cpu_s: ") + cpu;
        }
        if (u.contains("peak_memory_bytes") && u["peak_memory_bytes"].is_number_unsigned())
            line += (line.empty() ? "" : ", ") + std::string("peak_memory_mib: ") +
                    std::to_string(u["peak_memory_bytes"].get<std::uint64_t>() >> 20);
        if (!line.empty()) head += line + "\n";
        if (u.contains("execution_id") && u["execution_id"].is_string())
            head += "execution_id: " + u["execution_id"].get<std::string>() + "\n";
    }
    if (status == "timeout") head += "The cell ran past its time limit and was interrupted; its state up to then is kept.\n";
    if (status == "kernel_died") head += "The kernel died (out of memory?) and was restarted: variables are lost, files are kept.\n";
    if (result.value("kernel_restarted", false) && status != "kernel_died") head += "The kernel was restarted during the cell.\n";

    std::vector<section> parts;
    const auto truncated = result.value("truncated", json::object());
    auto stream = [&](const char* name) {
        auto t = result.value(name, "");
        if (truncated.value(name, false)) t += "\n[more " + std::string(name) + " was dropped at the session's output limit]";
        if (!t.empty()) parts.push_back({name, std::move(t)});
    };
    stream("stdout");
    stream("stderr");

    json images = json::array();
    std::size_t image_bytes = 0, images_left_out = 0;
    std::string notes;
    for (const auto& r : result.value("results", json::array())) {
        const auto& data = r.contains("data") ? r["data"] : json::object();
        bool imaged = false;
        for (const char* mime : {"image/png", "image/jpeg"}) {
            if (imaged || !data.contains(mime) || !data[mime].is_string()) continue;
            auto b64 = strip_whitespace(data[mime].get<std::string>());
            imaged = true;
            if (images.size() >= limits.max_images || b64.size() / 4 * 3 > limits.max_image_bytes ||
                image_bytes + b64.size() > limits.max_images_total) {
                ++images_left_out;
                continue;
            }
            image_bytes += b64.size();
            images.push_back({{"type", "image"}, {"data", std::move(b64)}, {"mimeType", mime}});
        }
        if (!imaged && data.contains("image/svg+xml"))
            notes += "An SVG image was displayed (not sent: save plots as PNG to see them).\n";
        const bool main = r.value("is_main_result", false);
        if (imaged && !main) continue;  // a plot's text/plain is "<Figure size …>"
        auto t = text_of_bundle(data, false);
        if (t.empty() && data.contains("text/html")) t = "[an HTML display; no text form]";
        if (!t.empty()) parts.push_back({main ? "result" : "display", std::move(t)});
    }
    if (images_left_out > 0)
        notes += std::to_string(images_left_out) + " more image(s) not sent (past " + std::to_string(limits.max_images) +
                 " per result or their size limit).\n";
    if (truncated.value("results", false)) notes += "More displays were dropped at the session's result limit.\n";

    if (const auto& e = result.contains("error") ? result["error"] : json(nullptr); e.is_object()) {
        std::string t = e.value("ename", "Error") + ": " + e.value("evalue", "");
        const auto tb = e.value("traceback_text", "");
        if (!tb.empty()) t += "\n" + tb;
        parts.push_back({"error", std::move(t)});
    }

    json links = json::array();
    std::string listed;
    const auto files = result.value("files", json::array());
    if (!files.empty()) {
        listed += "--- files ---\n";
        for (const auto& f : files) {
            const auto path = f.value("path", "");
            const auto uri = file_uri(session_id, path);
            listed += f.value("change", "changed") + " " + path + " (" + f.value("size", json(0)).dump() + " bytes, " +
                      f.value("mime_type", "application/octet-stream") + ") " + uri + "\n";
            links.push_back({{"type", "resource_link"},
                             {"uri", uri},
                             {"name", path},
                             {"mimeType", f.value("mime_type", "application/octet-stream")},
                             {"size", f.value("size", json(0))}});
        }
        if (truncated.value("files", false)) listed += "[more files changed than are listed]\n";
    }

    // The budget is a ceiling on the whole text block: the head, the
    // sections' titles, the file list and the notes come out of it first,
    // and the sections share what is left.
    std::size_t fixed = head.size() + listed.size() + notes.size();
    for (const auto& p : parts) fixed += p.title.size() + 10;  // "--- " title " ---\n", and a closing newline
    std::vector<std::size_t> sizes;
    for (const auto& p : parts) sizes.push_back(p.text.size());
    const auto budgets = agent::share_budget(sizes, limits.text_bytes > fixed ? limits.text_bytes - fixed : 0);
    std::string text = head;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        auto kept = agent::head_and_tail(parts[i].text, budgets[i]);
        text += "--- " + parts[i].title + " ---\n" + kept + (kept.ends_with('\n') ? "" : "\n");
    }
    text += listed + notes;
    // Past the budget only when the head and the file list alone are.
    if (text.size() > limits.text_bytes) text.resize(utf8_complete_length(std::string_view(text).substr(0, limits.text_bytes)));

    json content = json::array({{{"type", "text"}, {"text", std::move(text)}}});
    for (auto& i : images) content.push_back(std::move(i));
    for (auto& l : links) content.push_back(std::move(l));
    json out = {{"content", std::move(content)}};
    if (status != "ok") out["isError"] = true;
    return out;
}

}  // namespace cellgate::mcp
