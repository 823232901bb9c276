#include "kernels/node_id.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>

using namespace cellgate;

namespace {

// Restores "no tag" whatever a test set.
struct node_id_test : ::testing::Test {
    void TearDown() override { kernels::set_node_tag(""); }
};

const std::regex uuid_shape("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");

}  // namespace

TEST_F(node_id_test, without_a_tag_ids_are_plain_random_uuids) {
    EXPECT_EQ(kernels::node_tag(), "");
    std::set<std::string> firsts;
    for (int i = 0; i < 50; ++i) {
        const auto id = kernels::make_node_id();
        EXPECT_TRUE(std::regex_match(id, uuid_shape)) << id;
        firsts.insert(id.substr(0, 8));
    }
    EXPECT_GT(firsts.size(), 45u);
}

TEST_F(node_id_test, with_a_tag_the_first_group_is_the_tag_and_the_rest_stays_random) {
    kernels::set_node_tag("0a1b2c3d");
    std::set<std::string> ids;
    for (int i = 0; i < 50; ++i) {
        const auto id = kernels::make_node_id();
        EXPECT_TRUE(std::regex_match(id, uuid_shape)) << id;  // Jupyter clients route only UUID-shaped ids
        EXPECT_EQ(id.substr(0, 9), "0a1b2c3d-");
        EXPECT_EQ(kernels::tag_of(id), "0a1b2c3d");
        ids.insert(id);
    }
    EXPECT_EQ(ids.size(), 50u);
}

TEST_F(node_id_test, a_tag_is_eight_lowercase_hex_digits) {
    for (const std::string bad : {"0a1b2c3", "0a1b2c3d4", "0A1B2C3D", "0a1b2c3g", "node-one", "../../x"}) {
        EXPECT_FALSE(kernels::valid_node_tag(bad)) << bad;
        EXPECT_THROW(kernels::set_node_tag(bad), std::invalid_argument) << bad;
    }
    EXPECT_EQ(kernels::node_tag(), "");  // a refused tag changes nothing
    EXPECT_TRUE(kernels::valid_node_tag("deadbeef"));
}

TEST_F(node_id_test, tag_of_reads_only_uuid_shaped_ids) {
    EXPECT_EQ(kernels::tag_of("deadbeef-0000-4000-8000-000000000000"), "deadbeef");
    EXPECT_EQ(kernels::tag_of("deadbeef"), std::nullopt);
    EXPECT_EQ(kernels::tag_of("deadbeeg-0000-4000-8000-000000000000"), std::nullopt);
    EXPECT_EQ(kernels::tag_of("deadbeef_0000-4000-8000-000000000000"), std::nullopt);
}
