#include "kit/request_models.hpp"
#include "kernels/session_registry.hpp"
#include "util/api_error.hpp"

#include <gtest/gtest.h>

using namespace cellgate;

TEST(session_registry, each_tenant_has_a_cap_on_records) {
    kernels::session_registry reg(3);
    for (int i = 0; i < 3; ++i)
        ASSERT_TRUE(reg.add({"", "a", "nb" + std::to_string(i) + ".ipynb", "", "notebook", "k1"})) << i;
    EXPECT_FALSE(reg.has_room("a"));
    EXPECT_FALSE(reg.add({"", "a", "one-more.ipynb", "", "notebook", "k1"}));
    // Another tenant is not affected, and a removal makes room again.
    EXPECT_TRUE(reg.has_room("b"));
    EXPECT_TRUE(reg.add({"", "b", "x.ipynb", "", "notebook", "k2"}));
    reg.remove("a", reg.list("a").front().id);
    EXPECT_TRUE(reg.add({"", "a", "again.ipynb", "", "notebook", "k1"}));
    EXPECT_EQ(reg.list("a").size(), 3u);
}

TEST(session_registry, fields_have_a_length_limit) {
    const std::string ok(kit::max_session_field_bytes, 'p');
    const std::string too_long(kit::max_session_field_bytes + 1, 'p');
    EXPECT_EQ(kit::session_fields_from({{"path", ok}}).path, ok);
    for (const char* key : {"path", "name", "type"}) {
        nlohmann::json body = {{"path", "a.ipynb"}};
        body[key] = too_long;
        try {
            kit::session_fields_from(body);
            ADD_FAILURE() << key << " of " << too_long.size() << " bytes was accepted";
        } catch (const api_exception& e) {
            EXPECT_EQ(e.status(), 400u) << key;
        }
    }
}
