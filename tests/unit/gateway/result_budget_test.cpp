#include "agent/result_budget.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

using namespace cellgate::agent;
using nlohmann::json;

namespace {

std::size_t kept_index(std::string_view mime) {
    for (std::size_t i = 0; i < kept_mime_types.size(); ++i)
        if (kept_mime_types[i] == mime) return i;
    return kept_mime_types.size();
}

}  // namespace

TEST(result_budget, a_result_costs_its_kept_data_its_metadata_and_a_fixed_overhead) {
    const json data = {{"text/plain", "x"}, {"image/png", "iVBOR"}, {"application/x-unkept", std::string(5000, 'u')}};
    const json metadata = {{"pad", std::string(8 << 20, 'm')}};
    const json content = {{"data", data}, {"metadata", metadata}, {"transient", {{"display_id", "d"}}}};
    const std::string text = content.dump();  // the parts are views into it
    const auto p = peek_result(text);
    EXPECT_EQ(p.data[kept_index("text/plain")], R"("x")");
    EXPECT_EQ(p.data[kept_index("image/png")], R"("iVBOR")");
    EXPECT_EQ(p.metadata.size(), metadata.dump().size());
    EXPECT_TRUE(p.execution_count.empty());
    const json kept = {{"text/plain", "x"}, {"image/png", "iVBOR"}};
    // Serialized: the kept data and the metadata, as the result will carry them.
    EXPECT_EQ(p.cost_bytes, result_overhead_bytes + kept.dump().size() + metadata.dump().size());
}

TEST(result_budget, an_execute_result_counts_its_execution_count_and_missing_parts_count_as_empty) {
    const auto p = peek_result(R"({"execution_count": 12, "data": {"text/plain": "2"}})");
    EXPECT_EQ(p.execution_count, "12");
    EXPECT_TRUE(p.metadata.empty());
    EXPECT_EQ(p.cost_bytes, result_overhead_bytes + std::string(R"({"text/plain":"2"})").size() + 2 + 2);
    const auto none = peek_result(R"({"data": "not an object"})");
    for (const auto& d : none.data) EXPECT_TRUE(d.empty());
    EXPECT_EQ(none.cost_bytes, result_overhead_bytes + 2 + 2);
}

TEST(result_budget, repeated_keys_are_counted_as_a_parse_keeps_them) {
    // A small first "metadata" must not hide the large last one a parse keeps.
    const std::string big(1 << 20, 'm');
    const std::string content = R"({"data":{"text/plain":"a","text/plain":")" + big + R"("},"metadata":{},"metadata":{"p":")" +
                                big + R"("}})";
    const auto p = peek_result(content);
    const auto parsed = json::parse(content);
    EXPECT_EQ(p.data[kept_index("text/plain")].size(), parsed["data"]["text/plain"].dump().size());
    EXPECT_EQ(p.metadata.size(), parsed["metadata"].dump().size());
    EXPECT_GT(p.cost_bytes, 2u * big.size());
}

TEST(result_budget, the_cap_holds_in_bytes_and_in_number_and_drops_everything_after_the_first_refusal) {
    results_budget bytes_cap(10 * 1024, 1000);
    EXPECT_TRUE(bytes_cap.admit(4 * 1024));
    EXPECT_TRUE(bytes_cap.admit(6 * 1024));  // exactly full
    EXPECT_FALSE(bytes_cap.truncated());
    EXPECT_FALSE(bytes_cap.admit(1));
    EXPECT_TRUE(bytes_cap.truncated());
    EXPECT_EQ(bytes_cap.bytes(), 10u * 1024);

    results_budget after_refusal(10 * 1024, 1000);
    EXPECT_TRUE(after_refusal.admit(1024));
    EXPECT_FALSE(after_refusal.admit(20 * 1024));
    EXPECT_FALSE(after_refusal.admit(1024));  // it would fit, but the results stay a prefix

    results_budget count_cap(1u << 30, 3);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(count_cap.admit(result_overhead_bytes + 30));
    EXPECT_FALSE(count_cap.admit(result_overhead_bytes + 30));
    EXPECT_EQ(count_cap.count(), 3u);
}

TEST(result_budget, twenty_thousand_one_line_displays_do_not_fit_in_the_default_cap) {
    results_budget b(32u << 20, 10000);
    std::size_t admitted = 0;
    const auto one_line = peek_result(R"({"data":{"text/plain":"tiny 12345"},"metadata":{}})");
    for (int i = 0; i < 20000; ++i) admitted += b.admit(one_line.cost_bytes) ? 1 : 0;
    EXPECT_EQ(admitted, 10000u);
    EXPECT_TRUE(b.truncated());
}
