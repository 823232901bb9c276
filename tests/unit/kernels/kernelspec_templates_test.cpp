// A template's kernelspec in the registry (kernels/kernelspecs.hpp): seen
// by its tenant only, hidden from listings and lookups once removed, yet
// still found by name for the sessions running on it.
#include "kernels/kernelspecs.hpp"

#include <gtest/gtest.h>

using namespace cellgate;

namespace {

class KernelspecTemplates : public ::testing::Test {
protected:
    static launcher::launcher_config no_images() {
        launcher::launcher_config c;
        // Nothing to read: the operator's spec keeps the fields it is given.
        c.image_store = std::filesystem::temp_directory_path() / "cellgate-kernelspec-templates-test-absent";
        return c;
    }

    static kernels::kernelspec template_spec(const std::string& name, const std::string& owner, const std::string& image) {
        auto k = kernels::default_python_kernelspec();
        k.name = name;
        k.display_name = "analytics:v1";
        k.image = image;
        k.owner = owner;
        k.image_env = {{"MODE", "prod"}};
        return k;
    }

    bool listed(const std::string& name, const std::string& tenant) const {
        return specs.models(tenant)["kernelspecs"].contains(name);
    }

    const std::string name = "t0123456789ab-analytics-v1";
    const std::string image_1 = "l-" + std::string(48, '1');
    const std::string image_2 = "l-" + std::string(48, '2');
    kernels::kernelspec_registry specs{{kernels::default_python_kernelspec()}, "python3", no_images()};
};

}  // namespace

TEST_F(KernelspecTemplates, a_template_is_found_for_its_tenant_only) {
    specs.add_template(template_spec(name, "A", image_1));
    const auto* mine = specs.find_for(name, "A");
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->name, name);
    EXPECT_EQ(mine->image, image_1);
    EXPECT_EQ(mine->owner, "A");
    EXPECT_EQ(mine->image_env.at("MODE"), "prod");
    EXPECT_EQ(mine, specs.find(name));
    EXPECT_EQ(specs.find_for(name, "B"), nullptr);
    EXPECT_EQ(specs.find_for(name, ""), nullptr);  // not even the operator's tenant
}

TEST_F(KernelspecTemplates, the_operators_kernelspec_is_found_for_every_tenant) {
    specs.add_template(template_spec(name, "A", image_1));
    for (const std::string tenant : {"A", "B", ""}) {
        const auto* k = specs.find_for("python3", tenant);
        ASSERT_NE(k, nullptr) << tenant;
        EXPECT_EQ(k->name, "python3");
        EXPECT_TRUE(listed("python3", tenant)) << tenant;
    }
}

TEST_F(KernelspecTemplates, a_template_is_listed_for_its_tenant_only) {
    specs.add_template(template_spec(name, "A", image_1));
    EXPECT_TRUE(listed(name, "A"));
    EXPECT_FALSE(listed(name, "B"));
    EXPECT_FALSE(listed(name, ""));
    const auto models = specs.models("A");
    EXPECT_EQ(models["default"], "python3");
    EXPECT_EQ(models["kernelspecs"].size(), 2u);
    EXPECT_EQ(models["kernelspecs"][name]["spec"]["display_name"], "analytics:v1");
    EXPECT_EQ(models["kernelspecs"][name]["spec"]["metadata"]["cellgate"]["image"], image_1);
    EXPECT_EQ(specs.models("B")["kernelspecs"].size(), 1u);
    // The operator's list holds no template.
    EXPECT_EQ(specs.all().size(), 1u);
    EXPECT_EQ(specs.all().count(name), 0u);
}

TEST_F(KernelspecTemplates, a_hidden_template_is_found_by_name_only) {
    specs.add_template(template_spec(name, "A", image_1));
    const auto* before = specs.find(name);
    ASSERT_NE(before, nullptr);
    specs.hide(name);
    EXPECT_EQ(specs.find_for(name, "A"), nullptr);
    EXPECT_FALSE(listed(name, "A"));
    // Sessions still running on it find it, at the same address.
    const auto* after = specs.find(name);
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(after, before);
    EXPECT_EQ(after->image, image_1);
}

TEST_F(KernelspecTemplates, hiding_an_unknown_name_changes_nothing) {
    specs.add_template(template_spec(name, "A", image_1));
    specs.hide("t0123456789ab-other-v1");
    specs.hide("python3");
    EXPECT_NE(specs.find_for(name, "A"), nullptr);
    EXPECT_NE(specs.find_for("python3", "A"), nullptr);
    EXPECT_EQ(specs.find("t0123456789ab-other-v1"), nullptr);
}

TEST_F(KernelspecTemplates, a_rebuilt_template_replaces_the_current_and_keeps_the_old_alive) {
    specs.add_template(template_spec(name, "A", image_1));
    const auto* old = specs.find(name);
    specs.hide(name);
    specs.add_template(template_spec(name, "A", image_2));
    const auto* current = specs.find_for(name, "A");
    ASSERT_NE(current, nullptr);
    EXPECT_EQ(current->image, image_2);
    EXPECT_EQ(specs.find(name), current);
    EXPECT_TRUE(listed(name, "A"));
    // The old version's sessions keep a valid spec.
    EXPECT_EQ(old->image, image_1);
}
