// Output sized for a model (agent/output_budget.hpp): head and tail with a
// marker, the capture that renders a stream it never held whole, how parts
// share a budget, collapsed frames, image sizes from headers, table summaries.
#include "agent/output_budget.hpp"
#include "util/encoding.hpp"

#include <gtest/gtest.h>

namespace cellgate::agent {
namespace {

using nlohmann::json;

TEST(OutputBudget, HeadAndTailKeepsBothEndsAndSaysWhatWent) {
    EXPECT_EQ(head_and_tail("short", 100), "short");
    std::string text;
    for (int i = 0; i < 1000; ++i) text += "line " + std::to_string(i) + "\n";
    const auto cut = head_and_tail(text, 400);
    EXPECT_LE(cut.size(), 400u);
    EXPECT_TRUE(cut.starts_with("line 0\nline 1\n"));
    EXPECT_TRUE(cut.ends_with("line 999\n"));
    EXPECT_NE(cut.find(" bytes ("), std::string::npos);
    EXPECT_NE(cut.find(" lines) elided …"), std::string::npos);
    // Whole UTF-8 sequences only, however the cut falls.
    const std::string wide(3000, 'x');
    for (std::size_t budget = 200; budget < 210; ++budget) {
        const auto u = head_and_tail("é" + wide + "€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€", budget);
        EXPECT_TRUE(is_valid_utf8(u)) << budget;
    }
}

// A program's output into a JSON string: valid text as it is, each bad byte as U+FFFD.
TEST(OutputBudget, ValidUtf8KeepsTextAndReplacesBadBytes) {
    EXPECT_EQ(valid_utf8("héllo €"), "héllo €");
    EXPECT_EQ(valid_utf8(std::string("a\xff" "b", 3)), "a\xEF\xBF\xBD" "b");
    const auto cut = std::string("\xE2\x82\xAC").substr(0, 2);  // a euro sign cut short
    EXPECT_TRUE(is_valid_utf8(valid_utf8("x" + cut)));
    EXPECT_EQ(valid_utf8(""), "");
}

// A share too small for the marker still stays within it: the budget is a
// ceiling however many parts share it.
TEST(OutputBudget, ASharePastTheMarkersRoomIsStillACeiling) {
    const std::string text(5000, 'y');
    const std::string where = "; all of it: GET /v1/sessions/s/executions/e/output?stream=stdout";
    for (const std::size_t budget : {0u, 1u, 40u, 159u, 160u, 161u, 230u, 300u}) {
        EXPECT_LE(head_and_tail(text, budget).size(), budget) << budget;
        EXPECT_LE(head_and_tail("é" + text, budget, where).size(), budget) << budget;
        EXPECT_TRUE(is_valid_utf8(head_and_tail("é" + text, budget))) << budget;
        text_capture cap(1000);
        for (int i = 0; i < 10; ++i) cap.append(text);
        EXPECT_LE(cap.render(budget, where).size(), budget) << budget;
    }
}

TEST(OutputBudget, CaptureRendersAsTheWholeTextWouldBeCut) {
    text_capture cap(1000);
    std::string whole;
    for (int i = 0; i < 5000; ++i) {
        const auto piece = "line " + std::to_string(i) + "\n";
        cap.append(piece);
        whole += piece;
    }
    EXPECT_EQ(cap.total_bytes(), whole.size());
    EXPECT_FALSE(cap.whole());
    const auto r = cap.render(1000, "; all of it: GET /x");
    EXPECT_LE(r.size(), 1000u);
    EXPECT_TRUE(r.starts_with("line 0\n"));
    EXPECT_TRUE(r.ends_with("line 4999\n"));
    EXPECT_NE(r.find(" lines) elided; all of it: GET /x …"), std::string::npos);
    // What it says went is what went.
    const auto at = r.find("\n… ");
    const auto elided = std::stoull(r.substr(at + 5));
    const auto kept = r.size() - (r.find(" …\n", at) + std::string_view(" …\n").size() - at);
    EXPECT_EQ(elided + kept, whole.size());

    text_capture small(1000);
    small.append("short\n");
    EXPECT_TRUE(small.whole());
    EXPECT_EQ(small.render(1000), "short\n");
}

TEST(OutputBudget, ShareKeepsSmallPartsWhole) {
    EXPECT_EQ(share_budget({10, 5000, 100}, 1000), (std::vector<std::size_t>{10, 890, 100}));
    EXPECT_EQ(share_budget({}, 1000), std::vector<std::size_t>{});
    EXPECT_EQ(share_budget({600, 600}, 1000), (std::vector<std::size_t>{500, 500}));
}

TEST(OutputBudget, RepeatedFramesCollapse) {
    const json tb = {"Traceback", "\x1b[31mframe f\x1b[0m", "frame f", "frame f", "frame g", "Error"};
    EXPECT_EQ(collapse_frames(tb), (json{"Traceback", "\x1b[31mframe f\x1b[0m",
                                         "[… the frame above repeated 2 more times]", "frame g", "Error"}));
    EXPECT_EQ(collapse_frames(json{"a", "b"}), (json{"a", "b"}));
}

TEST(OutputBudget, ImageSizesFromHeadersOnly) {
    std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x0f\xa0\0\0\x0b\xb8\x08\x06\0\0\0", 29);
    EXPECT_EQ(image_size(png), (std::pair<std::uint32_t, std::uint32_t>{4000, 3000}));
    // JPEG: SOI, an APP0 segment, then SOF0 with height 480 and width 640.
    std::string jpeg("\xff\xd8\xff\xe0\0\x04xx\xff\xc0\0\x11\x08\x01\xe0\x02\x80\x03", 19);
    EXPECT_EQ(image_size(jpeg), (std::pair<std::uint32_t, std::uint32_t>{640, 480}));
    EXPECT_FALSE(image_size("GIF89a"));
    EXPECT_FALSE(image_size(std::string("\xff\xd8\xff\xe0\0\x01", 6)));
}

TEST(OutputBudget, TableSummary) {
    const json t = {{"kind", "DataFrame"}, {"shape", {100000, 2}}, {"columns", {{"a", "int64"}, {"b", "object"}}},
                    {"head", "   a  b\n0  1  x"}};
    EXPECT_EQ(table_summary(t), "DataFrame: 100000 rows × 2 columns\ncolumns: a (int64) b (object)\nfirst rows:\n   a  b\n0  1  x\n");
    // A hostile kernel's "summary": any type anywhere, never an exception.
    for (const auto& bad : {json("text"), json::array({1, 2}), json(nullptr), json{{"kind", 5}, {"shape", "big"}},
                            json{{"shape", {1, "x"}}, {"columns", {1, 2}}, {"head", {{"a", 1}}}},
                            json{{"columns", {{"a", {1, 2}}}}, {"shape", {1, 2, 3}}}})
        EXPECT_NO_THROW(table_summary(bad)) << bad.dump();
    EXPECT_EQ(table_summary(json("text")), "");
    EXPECT_EQ(table_summary(json{{"kind", 5}, {"shape", "big"}}), "DataFrame\n");
}

}  // namespace
}  // namespace cellgate::agent
