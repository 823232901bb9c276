#include "kit/request_models.hpp"
#include "agent/agent_service.hpp"
#include "core/cell_request.hpp"
#include "core/session_request.hpp"
#include "kernels/kernel.hpp"
#include "util/api_error.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace cellgate;
using namespace cellgate::kit;
using nlohmann::json;

namespace {

// The status a body model answers with: 200 when it is accepted, the
// api_exception's status, or 400 for a nlohmann type error (as the server maps it).
template <class Fn>
unsigned status_of(Fn fn) {
    try {
        fn();
        return 200;
    } catch (const api_exception& e) {
        return e.status();
    } catch (const json::exception&) {
        return 400;
    }
}

form_part file_part(std::string filename) {
    form_part p;
    p.name = "file";
    p.filename = std::move(filename);
    p.data = "data";
    return p;
}

}  // namespace

TEST(request_models, kernel_start) {
    EXPECT_EQ(kernel_name_from(json::object()), "");
    EXPECT_EQ(kernel_name_from({{"name", nullptr}}), "");
    EXPECT_EQ(kernel_name_from({{"name", "python3"}}), "python3");
    EXPECT_EQ(status_of([] { kernel_name_from({{"name", 3}}); }), 400u);

    const auto env = kernel_env_from({{"env", {{"KERNEL_USERNAME", "u"}, {"PATH", "/evil"}, {"LD_PRELOAD", 1}}}});
    EXPECT_EQ(env, (std::map<std::string, std::string>{{"KERNEL_USERNAME", "u"}}));
    EXPECT_EQ(status_of([] { kernel_env_from({{"env", "x"}}); }), 400u);
    EXPECT_EQ(status_of([] { kernel_env_from({{"env", {{"KERNEL_X", 1}}}}); }), 400u);
    EXPECT_TRUE(kernel_env_from({{"env", nullptr}}).empty());
}

TEST(request_models, agent_env_is_strict) {
    EXPECT_EQ(strict_env({{"env", {{"KERNEL_A", "1"}}}}).at("KERNEL_A"), "1");
    EXPECT_EQ(status_of([] { strict_env({{"env", {{"PATH", "/x"}}}}); }), 400u);
}

TEST(request_models, session_create) {
    const auto f = session_fields_from({{"path", "a.ipynb"}, {"name", "a"}});
    EXPECT_EQ(f.path, "a.ipynb");
    EXPECT_EQ(f.name, "a");
    EXPECT_EQ(f.type, "notebook");
    EXPECT_EQ(session_fields_from({{"notebook", "old.ipynb"}}).path, "old.ipynb");
    EXPECT_EQ(status_of([] { session_fields_from({{"name", "a"}}); }), 400u);
    EXPECT_EQ(status_of([] { session_fields_from({{"path", 1}}); }), 400u);

    EXPECT_EQ(kernel_member(json::object()), json::object());
    EXPECT_EQ(kernel_member({{"kernel", {{"id", "k"}}}}).at("id"), "k");
    EXPECT_EQ(status_of([] { kernel_member({{"kernel", "python3"}}); }), 400u);
    EXPECT_EQ(string_field({{"type", nullptr}}, "type", "console"), "console");
}

TEST(request_models, contents_put_payload) {
    EXPECT_FALSE(contents_payload_from({{"type", "file"}}, "file").data);
    EXPECT_EQ(*contents_payload_from({{"content", "hi"}}, "file").data, "hi");
    EXPECT_EQ(*contents_payload_from({{"content", "aGk="}, {"format", "base64"}}, "file").data, "hi");
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", "!!"}, {"format", "base64"}}, "file"); }), 400u);
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", "x"}, {"format", "hex"}}, "file"); }), 400u);
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", 1}}, "file"); }), 400u);
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", "x"}, {"format", 1}}, "file"); }), 400u);

    EXPECT_EQ(*contents_payload_from({{"content", {{"cells", json::array()}}}}, "notebook").data,
              "{\n \"cells\": []\n}");
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", "text"}}, "notebook"); }), 400u);

    EXPECT_EQ(contents_payload_from({{"content", "x"}, {"chunk", 1}}, "file").chunk, 1);
    EXPECT_EQ(contents_payload_from({{"content", "x"}, {"chunk", 7}}, "file").chunk, 7);
    EXPECT_EQ(contents_payload_from({{"content", "x"}, {"chunk", -1}}, "file").chunk, -1);
    EXPECT_FALSE(contents_payload_from({{"content", "x"}, {"chunk", nullptr}}, "file").chunk);
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", "x"}, {"chunk", 0}}, "file"); }), 400u);
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", "x"}, {"chunk", -2}}, "file"); }), 400u);
    EXPECT_EQ(status_of([] { contents_payload_from({{"content", "x"}, {"chunk", 1.5}}, "file"); }), 400u);
}

TEST(request_models, contents_post_and_patch) {
    auto r = new_entry_from({{"copy_from", "k/a.txt"}, {"type", 5}});  // type is not read for a copy
    EXPECT_EQ(*r.copy_from, "k/a.txt");
    r = new_entry_from(json::object());
    EXPECT_FALSE(r.copy_from);
    EXPECT_EQ(r.type, "file");
    EXPECT_EQ(r.ext, "");
    EXPECT_EQ(new_entry_from({{"type", "file"}, {"ext", "py"}}).ext, ".py");
    EXPECT_EQ(new_entry_from({{"type", "notebook"}, {"ext", ".txt"}}).ext, ".ipynb");
    EXPECT_EQ(status_of([] { new_entry_from({{"type", 5}}); }), 400u);

    EXPECT_EQ(rename_target_from({{"path", "k/b.txt"}}), "k/b.txt");
    EXPECT_EQ(status_of([] { rename_target_from(json::object()); }), 400u);
    EXPECT_EQ(status_of([] { rename_target_from({{"path", nullptr}}); }), 400u);
}

TEST(request_models, agent_session_policy_is_capped) {
    const agent::agent_limits limits;
    EXPECT_EQ(agent_kernel_name(json::object()), "");
    EXPECT_EQ(agent_kernel_name({{"kernel", "python3"}}), "python3");
    EXPECT_EQ(status_of([] { agent_kernel_name({{"kernel", {{"name", "x"}}}}); }), 400u);

    // What a body asks for, and what the core grants over the defaults.
    const auto policy_from = [&](const json& body) {
        return core::policy_for(session_request_from(body, "t"), limits.defaults, limits);
    };
    const auto d = policy_from(json::object());
    EXPECT_EQ(d.exec_timeout, limits.defaults.exec_timeout);
    EXPECT_EQ(d.output_limit_bytes, limits.defaults.output_limit_bytes);
    const auto p = policy_from({{"timeout_s", 1e300}, {"lifetime_s", 60.9}, {"output_limit_bytes", 1}});
    EXPECT_EQ(p.exec_timeout, limits.maxima.exec_timeout);
    EXPECT_EQ(p.lifetime, std::chrono::seconds(61));  // rounded up, never down
    EXPECT_EQ(p.output_limit_bytes, 1u);
    // A fraction of a second must not truncate to 0, which means "no limit".
    const auto tiny = policy_from({{"lifetime_s", 0.5}, {"idle_timeout_s", 1e-9}, {"timeout_s", 0.01}});
    EXPECT_EQ(tiny.lifetime, std::chrono::seconds(1));
    EXPECT_EQ(tiny.idle_timeout, std::chrono::seconds(1));
    EXPECT_EQ(tiny.exec_timeout, std::chrono::seconds(1));
    EXPECT_EQ(core::cell_options(cell_request_from({{"code", ""}, {"timeout_s", 0.2}}), tiny, limits).timeout,
              std::chrono::seconds(1));
    for (const json bad : {json(0), json(-1), json("10"), json(true), json::array()})
        EXPECT_EQ(status_of([&] { policy_from({{"idle_timeout_s", bad}}); }), 400u) << bad;
}

TEST(request_models, execute_options) {
    const agent::agent_limits limits;
    kernels::kernel_policy policy;
    policy.exec_timeout = std::chrono::seconds(30);
    policy.output_limit_bytes = 1234;
    const auto options = [&](const json& body) { return core::cell_options(cell_request_from(body), policy, limits); };
    const auto o = options({{"code", "1+1"}});
    EXPECT_EQ(o.code, "1+1");
    EXPECT_EQ(o.timeout, std::chrono::seconds(30));
    EXPECT_EQ(o.output_limit_bytes, 1234u);
    EXPECT_EQ(o.budget_bytes, 0u);
    EXPECT_FALSE(o.output_at);
    EXPECT_EQ(options({{"code", ""}, {"timeout_s", 1e9}}).timeout, limits.maxima.exec_timeout);
    EXPECT_EQ(status_of([&] { options(json::object()); }), 400u);
    EXPECT_EQ(status_of([&] { options({{"code", 1}}); }), 400u);
    // A budget in tokens or bytes, never both; held between 64 tokens and 16 MiB.
    EXPECT_EQ(options({{"code", ""}, {"max_output_tokens", 100}}).budget_bytes, 400u);
    EXPECT_EQ(options({{"code", ""}, {"max_output_bytes", 1e12}}).budget_bytes, core::max_budget_bytes);
    EXPECT_EQ(options({{"code", ""}, {"max_output_tokens", 1e12}}).budget_bytes, core::max_budget_bytes);
    EXPECT_EQ(status_of([&] { options({{"code", ""}, {"max_output_tokens", 10}, {"max_output_bytes", 1000}}); }), 400u);
    EXPECT_EQ(status_of([&] { options({{"code", ""}, {"max_output_tokens", 63}}); }), 400u);
    EXPECT_EQ(status_of([&] { options({{"code", ""}, {"max_output_bytes", -5}}); }), 400u);
    EXPECT_EQ(status_of([&] { options({{"code", ""}, {"max_image_pixels", 100}}); }), 400u);
    EXPECT_EQ(options({{"code", ""}, {"max_image_pixels", 1e15}}).max_image_pixels, 64ull << 20);
    // A one-shot cell carries its files inline, up to the session's result limit.
    auto one_shot = cell_request_from({{"code", ""}});
    one_shot.inline_files = true;
    policy.result_limit_bytes = 777;
    EXPECT_EQ(core::cell_options(one_shot, policy, limits).inline_files_limit_bytes, 777u);
}

TEST(request_models, one_shot_files) {
    const auto files = inline_files_from({{"files", {{{"path", "data/in.csv"}, {"content_base64", "YSxi"}}}}});
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].first, "data/in.csv");
    EXPECT_EQ(files[0].second, "a,b");
    EXPECT_TRUE(inline_files_from({{"files", nullptr}}).empty());
    EXPECT_EQ(status_of([] { inline_files_from({{"files", "x"}}); }), 400u);
    EXPECT_EQ(status_of([] { inline_files_from({{"files", {1}}}); }), 400u);
    EXPECT_EQ(status_of([] { inline_files_from({{"files", {{{"path", "a"}}}}}); }), 400u);
    EXPECT_EQ(status_of([] { inline_files_from({{"files", {{{"path", "a"}, {"content_base64", "%"}}}}}); }), 400u);
    for (const char* bad : {"../etc/passwd", "/etc/passwd", "a//b", "a/./b", "a\\b"})
        EXPECT_EQ(status_of([&] { inline_files_from({{"files", {{{"path", bad}, {"content_base64", ""}}}}}); }),
                  400u)
            << bad;
}

TEST(request_models, multipart_file_paths) {
    form_part dir;
    dir.name = "path";
    dir.data = "data/in";
    EXPECT_EQ(form_directory({dir, file_part("a.csv")}), "data/in");
    EXPECT_EQ(form_directory({file_part("a.csv")}), "");

    EXPECT_EQ(form_file_path(file_part("a.csv"), ""), "a.csv");
    EXPECT_EQ(form_file_path(file_part("a.csv"), "data/in"), "data/in/a.csv");
    EXPECT_EQ(form_file_path(file_part("../../etc/passwd"), ""), "passwd");  // never a client-side path
    for (const char* bad : {"", ".", "..", "dir/"})
        EXPECT_EQ(status_of([&] { form_file_path(file_part(bad), ""); }), 400u) << bad;
    EXPECT_EQ(status_of([] { form_file_path(file_part("a"), "../up"); }), 400u);
    EXPECT_EQ(status_of([] { form_file_path(file_part("a"), "/abs"); }), 400u);
}

// Moved down from tests/integration/test_fork.py (which keeps one 400 on the
// wire): what a snapshot or fork request may hold.
TEST(request_models, snapshot_and_fork_requests) {
    EXPECT_EQ(snapshot_request_from(json::object()), "");  // no body at all: named by its id
    EXPECT_EQ(snapshot_request_from({{"name", "before the merge"}}), "before the merge");
    EXPECT_EQ(snapshot_request_from({{"name", nullptr}}), "");
    EXPECT_EQ(snapshot_request_from({{"name", std::string(128, 'x')}}), std::string(128, 'x'));
    for (const json& bad : {json{{"name", std::string(129, 'x')}}, json{{"name", 7}}, json{{"name", ""}},
                            json{{"name", "tab\there"}}, json{{"name", "del\x7f"}}, json{{"label", "a"}},
                            json::array()})
        EXPECT_EQ(status_of([&] { snapshot_request_from(bad); }), 400u) << bad.dump();

    EXPECT_EQ(fork_request_from(json::object()).count, 1u);
    EXPECT_EQ(fork_request_from({{"count", nullptr}}).count, 1u);
    const auto f = fork_request_from({{"count", 16}, {"name", "trial"}});
    EXPECT_EQ(f.count, 16u);
    EXPECT_EQ(f.name, "trial");
    for (const json& bad : {json{{"count", 0}}, json{{"count", 17}}, json{{"count", -1}}, json{{"count", "2"}},
                            json{{"count", 2.5}}, json{{"children", 2}}, json{{"name", 7}}, json("x")})
        EXPECT_EQ(status_of([&] { fork_request_from(bad); }), 400u) << bad.dump();
    try {
        fork_request_from({{"count", 17}});
    } catch (const api_exception& e) {
        EXPECT_NE(std::string(e.what()).find("from 1 to 16"), std::string::npos) << e.what();
    }
    // E2B's fork reads the same count.
    EXPECT_EQ(fork_count({{"count", 3}, {"timeout", 60}}), 3u);
    EXPECT_EQ(status_of([&] { fork_count({{"count", 0}}); }), 400u);
}
