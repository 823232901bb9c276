// The MCP surface's pure parts: the tool list and its argument checks, how an
// execution reads to a model (text block, images, resource links, budgets),
// file URIs, and MCP sessions (tenant-scoped, capped, idle-ended, surviving a
// restart through the state store).
#include "mcp/mcp_sessions.hpp"
#include "mcp/tools.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

namespace cellgate::mcp {
namespace {

using nlohmann::json;

TEST(McpTools, FixedNamesInOrderWithObjectSchemas) {
    const auto tools = tool_list(50, 3600);
    std::vector<std::string> names;
    for (const auto& t : tools) {
        names.push_back(t["name"]);
        EXPECT_EQ(t["inputSchema"]["type"], "object");
        EXPECT_FALSE(t["inputSchema"]["additionalProperties"].get<bool>());
        EXPECT_FALSE(t.contains("outputSchema")) << t["name"];
    }
    EXPECT_EQ(names, (std::vector<std::string>{"execute_code", "create_session", "snapshot_session", "fork_session",
                                               "close_session", "list_sessions", "write_file", "read_file",
                                               "list_files"}));
    EXPECT_EQ(tools[0]["inputSchema"]["properties"]["timeout_s"]["maximum"], 3600);
    EXPECT_TRUE(is_tool("read_file"));
    EXPECT_FALSE(is_tool("rm_rf"));
}

TEST(McpTools, ArgumentsAreChecked) {
    EXPECT_EQ(check_arguments("execute_code", {{"code", "1"}}), "");
    EXPECT_EQ(check_arguments("execute_code", {{"code", "1"}, {"session_id", nullptr}}), "");
    EXPECT_EQ(check_arguments("execute_code", json::object()), "'code' is required");
    EXPECT_EQ(check_arguments("execute_code", {{"code", 1}}), "'code' must be a string");
    EXPECT_EQ(check_arguments("execute_code", {{"code", "1"}, {"timeout_s", 1.5}}), "'timeout_s' must be a whole number");
    EXPECT_EQ(check_arguments("execute_code", {{"code", "1"}, {"timeout_s", 0}}), "'timeout_s' must be at least 1");
    EXPECT_NE(check_arguments("execute_code", {{"code", "1"}, {"sessionId", "x"}}).find("unknown argument 'sessionId'"),
              std::string::npos);
    EXPECT_EQ(check_arguments("write_file", {{"path", "a"}, {"content", ""}, {"encoding", "hex"}}),
              R"('encoding' must be one of ["utf-8","base64"])");
    EXPECT_EQ(check_arguments("list_sessions", json::array()), "the arguments must be an object");
    EXPECT_EQ(check_arguments("fork_session", {{"session_id", "s"}, {"count", 17}}), "'count' must be at most 16");
    EXPECT_EQ(check_arguments("fork_session", {{"session_id", "s"}, {"count", 16}}), "");
    EXPECT_EQ(check_arguments("fork_session", {{"count", 2}}), "'session_id' is required");
    EXPECT_EQ(check_arguments("snapshot_session", {{"session_id", "s"}, {"name", std::string(129, 'n')}}),
              "'name' must be at most 128 bytes");
    // A long cell timeout is the server's to refuse (its configured ceiling), not the schema table's.
    EXPECT_EQ(check_arguments("execute_code", {{"code", "1"}, {"timeout_s", 7200}}), "");
}

TEST(McpTools, FileUrisRoundTrip) {
    const auto uri = file_uri("abc-1", "plots/a b.png");
    EXPECT_EQ(uri, "cellgate://sessions/abc-1/files/plots/a%20b.png");
    const auto ref = parse_file_uri(uri);
    ASSERT_TRUE(ref);
    EXPECT_EQ(ref->session_id, "abc-1");
    EXPECT_EQ(ref->path, "plots/a b.png");
    EXPECT_FALSE(parse_file_uri("https://example.com/x"));
    EXPECT_FALSE(parse_file_uri("cellgate://sessions//files/x"));
    EXPECT_FALSE(parse_file_uri("cellgate://sessions/a%2Fb/files/x"));
}

json result_with(json extra) {
    json r = {{"status", "ok"}, {"execution_count", 3}, {"stdout", ""}, {"stderr", ""}, {"results", json::array()},
              {"error", nullptr}, {"files", json::array()}, {"duration_ms", 12}, {"truncated", json::object()}};
    r.update(extra);
    return r;
}

TEST(McpRender, TextImagesAndLinks) {
    const auto r = render_execution(
        result_with({{"stdout", "hello\n"},
                     {"results", json::array({{{"type", "display_data"}, {"is_main_result", false},
                                               {"data", {{"image/png", "iVBORw0K\nGgo="}, {"text/plain", "<Figure>"}}}},
                                              {{"type", "execute_result"}, {"is_main_result", true},
                                               {"data", {{"text/plain", "42"}, {"text/html", "<b>42</b>"}}}}})},
                     {"files", json::array({{{"path", "out/a.csv"}, {"size", 10}, {"mime_type", "text/csv"}, {"change", "created"}}})}}),
        "s-1", true, render_limits{});
    EXPECT_FALSE(r.contains("isError"));
    const auto& c = r["content"];
    ASSERT_EQ(c.size(), 3u);
    const auto text = c[0]["text"].get<std::string>();
    EXPECT_TRUE(text.starts_with("status: ok\nsession_id: s-1 (a new session"));
    EXPECT_NE(text.find("--- stdout ---\nhello\n"), std::string::npos);
    EXPECT_NE(text.find("--- result ---\n42\n"), std::string::npos);
    EXPECT_EQ(text.find("<Figure>"), std::string::npos) << "a plot's repr is noise";
    EXPECT_NE(text.find("created out/a.csv (10 bytes, text/csv) cellgate://sessions/s-1/files/out/a.csv"), std::string::npos);
    EXPECT_EQ(c[1], (json{{"type", "image"}, {"data", "iVBORw0KGgo="}, {"mimeType", "image/png"}}));
    EXPECT_EQ(c[2]["type"], "resource_link");
    EXPECT_EQ(c[2]["uri"], "cellgate://sessions/s-1/files/out/a.csv");
}

TEST(McpRender, ErrorsAndEndingsAreErrors) {
    const auto r = render_execution(
        result_with({{"status", "error"},
                     {"error", {{"ename", "ZeroDivisionError"}, {"evalue", "division by zero"}, {"traceback_text", "Traceback ...\n  line 1"}}}}),
        "s-1", false, render_limits{});
    EXPECT_TRUE(r["isError"].get<bool>());
    const auto text = r["content"][0]["text"].get<std::string>();
    EXPECT_NE(text.find("--- error ---\nZeroDivisionError: division by zero\nTraceback ...\n  line 1"), std::string::npos);
    EXPECT_EQ(text.find("new session"), std::string::npos);
    for (const char* status : {"timeout", "kernel_died", "interrupted"})
        EXPECT_TRUE(render_execution(result_with({{"status", status}}), "s", false, {})["isError"].get<bool>()) << status;
}

TEST(McpRender, BudgetSharedSoSmallPartsStayWhole) {
    std::string flood;
    for (int i = 0; i < 100000; ++i) flood += "row " + std::to_string(i) + "\n";
    render_limits limits;
    limits.text_bytes = 2000;
    const auto r = render_execution(result_with({{"stdout", flood}, {"stderr", "one warning\n"}}), "s", false, limits);
    const auto text = r["content"][0]["text"].get<std::string>();
    EXPECT_LE(text.size(), 2000u);
    EXPECT_NE(text.find("--- stderr ---\none warning\n"), std::string::npos);
    EXPECT_NE(text.find("row 0\n"), std::string::npos);
    EXPECT_NE(text.find("row 99999\n"), std::string::npos);
    EXPECT_NE(text.find("lines) elided"), std::string::npos);
}

// The budget is a ceiling on the whole text block, head, titles, file list
// and notes included (max_output_tokens=2000 gave 8,080 bytes before).
TEST(McpRender, TheBudgetIsACeilingOnTheWholeText) {
    std::string flood, tb;
    for (int i = 0; i < 20000; ++i) flood += "row " + std::to_string(i) + " é\n";
    for (int i = 0; i < 500; ++i) tb += "  File \"x.py\", line " + std::to_string(i) + "\n";
    json files = json::array();
    for (int i = 0; i < 20; ++i)
        files.push_back({{"path", "out/f" + std::to_string(i) + ".csv"}, {"size", 10}, {"mime_type", "text/csv"}, {"change", "created"}});
    const auto full = result_with({{"status", "error"}, {"stdout", flood}, {"stderr", flood},
                                   {"results", json::array({{{"type", "execute_result"}, {"is_main_result", true},
                                                             {"data", {{"text/plain", flood}}}}})},
                                   {"error", {{"ename", "E"}, {"evalue", "v"}, {"traceback_text", tb}}},
                                   {"files", files}, {"truncated", {{"stdout", true}, {"results", true}}},
                                   {"usage", {{"cpu_s", 1.5}, {"peak_memory_bytes", 1 << 30}, {"execution_id", "e-1"}}}});
    for (const std::size_t budget : {std::size_t{8000}, std::size_t{2000}, std::size_t{256}, std::size_t{64}}) {
        render_limits limits;
        limits.text_bytes = budget;
        const auto text = render_execution(full, "s-1", true, limits)["content"][0]["text"].get<std::string>();
        EXPECT_LE(text.size(), budget) << budget;
        EXPECT_TRUE(text.starts_with("status: error")) << budget;
    }
}

TEST(McpRender, ImagesAreCapped) {
    json results = json::array();
    for (int i = 0; i < 10; ++i)
        results.push_back({{"type", "display_data"}, {"data", {{"image/png", "iVBORw0KGgo="}}}});
    results.push_back({{"type", "display_data"}, {"data", {{"image/svg+xml", "<svg/>"}}}});
    const auto r = render_execution(result_with({{"results", results}}), "s", false, render_limits{});
    EXPECT_EQ(r["content"].size(), 9u);  // the text and 8 images
    const auto text = r["content"][0]["text"].get<std::string>();
    EXPECT_NE(text.find("2 more image(s) not sent"), std::string::npos);
    EXPECT_NE(text.find("An SVG image was displayed"), std::string::npos);
}

TEST(McpSessions, TenantScopedCappedAndDurable) {
    const auto dir = std::filesystem::temp_directory_path() / ("mcp-sessions-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::string kept;
    {
        kernels::state_store store(dir / "gateway.db");
        mcp_sessions book(&store, 2, std::chrono::seconds(3600));
        const auto a = book.open("alpha", "2025-11-25", "client", "1");
        EXPECT_EQ(a.id.size(), 64u);
        EXPECT_TRUE(book.use("alpha", a.id));
        EXPECT_FALSE(book.use("beta", a.id)) << "another tenant's session is not there";
        const auto b = book.open("alpha", "2025-06-18", "client", "1");
        ASSERT_TRUE(book.use("alpha", a.id));  // a is now the more recently used
        const auto c = book.open("alpha", "2025-11-25", "client", "1");  // past the cap: b goes
        EXPECT_FALSE(book.use("alpha", b.id));
        EXPECT_TRUE(book.use("alpha", a.id));
        EXPECT_TRUE(book.close("alpha", c.id));
        EXPECT_FALSE(book.close("alpha", c.id));
        kept = a.id;
    }
    {
        kernels::state_store store(dir / "gateway.db");
        mcp_sessions book(&store, 2, std::chrono::seconds(3600));
        book.load();
        EXPECT_EQ(book.size(), 1u);
        const auto s = book.use("alpha", kept);
        ASSERT_TRUE(s);
        EXPECT_EQ(s->protocol_version, "2025-11-25");
        EXPECT_EQ(s->client_name, "client");
    }
    {
        kernels::state_store store(dir / "gateway.db");
        // A record last used two days ago is past a day's idle limit: not taken back.
        const auto old = std::chrono::duration_cast<std::chrono::milliseconds>(
                             (sys_clock::now() - std::chrono::hours(48)).time_since_epoch()).count();
        store.put_record({"mcp_session", "stale", "",
                          json{{"tenant", "alpha"}, {"protocol_version", "2025-11-25"}, {"created_ms", old},
                               {"last_used_ms", old}}});
        store.put_record({"mcp_session", "broken", "", json{{"tenant", "alpha"}}});
        mcp_sessions book(&store, 2, std::chrono::hours(24));
        book.load();
        EXPECT_EQ(book.size(), 1u);
        EXPECT_FALSE(book.use("alpha", "stale"));
        EXPECT_TRUE(book.use("alpha", kept));
        EXPECT_EQ(store.records("mcp_session").size(), 1u) << "the stale and the unreadable record are gone";
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cellgate::mcp

