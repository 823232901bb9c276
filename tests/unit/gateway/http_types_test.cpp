#include "http/http_types.hpp"
#include "http/router.hpp"
#include "util/api_error.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

using namespace cellgate;
using namespace cellgate::http;

namespace {

request_context with_body(std::string body) {
    request_context ctx;
    ctx.req.method(bhttp::verb::post);
    ctx.req.body() = std::move(body);
    return ctx;
}

unsigned status_of_json_body(const std::string& body) {
    try {
        (void)with_body(body).json_body(false);
        return 200;
    } catch (const api_exception& e) {
        return e.status();
    }
}

// Serialises a response the way the server does and counts the header lines a
// client would read back.
std::string wire_of(const response& r, const request* req, const std::vector<std::string>& origins) {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), 11};
    (void)set_response_headers(res.base(), r, req, origins);
    res.body() = r.body;
    res.prepare_payload();
    std::ostringstream out;
    out << res;
    return out.str();
}

}  // namespace

TEST(url_decode, strict_about_escapes_and_nul) {
    EXPECT_EQ(url_decode("a%20b%2Fc"), "a b/c");
    EXPECT_EQ(url_decode("a+b", true), "a b");
    EXPECT_EQ(url_decode("a+b"), "a+b");
    EXPECT_FALSE(url_decode("%"));
    EXPECT_FALSE(url_decode("%4"));
    EXPECT_FALSE(url_decode("%zz"));
    EXPECT_FALSE(url_decode("a%00b"));
    EXPECT_FALSE(url_decode(std::string_view("a\0b", 3)));
}

TEST(parse_query, decodes_pairs_and_skips_malformed_ones) {
    const auto q = parse_query("token=a%2Bb&content=0&bare&bad=%zz&&x=1+2");
    EXPECT_EQ(q.at("token"), "a+b");
    EXPECT_EQ(q.at("content"), "0");
    EXPECT_EQ(q.at("bare"), "");
    EXPECT_EQ(q.at("x"), "1 2");
    EXPECT_EQ(q.count("bad"), 0u);
}

TEST(url_encode_path, escapes_all_but_unreserved_and_slash) {
    EXPECT_EQ(url_encode_path("a/b c.txt"), "a/b%20c.txt");
    EXPECT_EQ(url_encode_path("x\r\ny"), "x%0D%0Ay");
    EXPECT_EQ(url_encode_path("\xc3\xa9"), "%C3%A9");
    EXPECT_EQ(url_decode(url_encode_path("q?#%&=\"")), "q?#%&=\"");
}

TEST(header_list_contains, finds_trimmed_items) {
    EXPECT_TRUE(header_list_contains("v1.kernel.websocket.jupyter.org", "v1.kernel.websocket.jupyter.org"));
    EXPECT_TRUE(header_list_contains("foo,  v1.kernel.websocket.jupyter.org ", "v1.kernel.websocket.jupyter.org"));
    EXPECT_FALSE(header_list_contains("v1.kernel.websocket.jupyter.orgx", "v1.kernel.websocket.jupyter.org"));
    EXPECT_FALSE(header_list_contains("", "x"));
    EXPECT_FALSE(header_list_contains(",,", "x"));
}

TEST(attachment_disposition, plain_names_are_unchanged) {
    EXPECT_EQ(attachment_disposition("plot.png"), "attachment; filename=\"plot.png\"");
}

TEST(attachment_disposition, hostile_names_cannot_break_out) {
    // A kernel names its files; this one would add a header to the response.
    const auto v = attachment_disposition("a\r\nSet-Cookie: x=1\".txt");
    EXPECT_TRUE(safe_header_value(v));
    EXPECT_EQ(v, "attachment; filename=\"a__Set-Cookie: x=1_.txt\"; "
                 "filename*=UTF-8''a%0D%0ASet-Cookie%3A%20x%3D1%22.txt");
    EXPECT_EQ(attachment_disposition("caf\xc3\xa9.csv"),
              "attachment; filename=\"caf__.csv\"; filename*=UTF-8''caf%C3%A9.csv");
}

TEST(set_response_headers, drops_values_that_would_split_the_response) {
    response r = json_response(200, {{"ok", true}});
    r.headers.emplace_back("Location", "/api/contents/a\r\nX-Injected: 1");
    r.headers.emplace_back("Content-Disposition", std::string("attachment; filename=\"a\0b\"", 26));
    r.headers.emplace_back("X-Fine", "yes");
    bhttp::response<bhttp::string_body> res;
    EXPECT_EQ(set_response_headers(res.base(), r, nullptr, {}), 2u);
    EXPECT_EQ(res.count("Location"), 0u);
    EXPECT_EQ(res.count("Content-Disposition"), 0u);
    EXPECT_EQ(res["X-Fine"], "yes");
    EXPECT_EQ(wire_of(r, nullptr, {}).find("X-Injected"), std::string::npos);
    EXPECT_EQ(res["Referrer-Policy"], "no-referrer");  // a ?token= URL never leaves in a Referer (L6)
}

TEST(set_response_headers, cors_only_for_allowed_origins) {
    request req;
    req.set(bhttp::field::origin, "https://lab.example.com");
    const response r = empty_response(204);
    bhttp::response<bhttp::string_body> res;
    set_response_headers(res.base(), r, &req, {"https://other.example.com"});
    EXPECT_EQ(res.count(bhttp::field::access_control_allow_origin), 0u);
    set_response_headers(res.base(), r, &req, {"https://lab.example.com"});
    EXPECT_EQ(res[bhttp::field::access_control_allow_origin], "https://lab.example.com");
    EXPECT_EQ(res[bhttp::field::server], "cellgate");
    EXPECT_EQ(res[bhttp::field::cache_control], "no-store");
    EXPECT_EQ(res.count(bhttp::field::content_type), 0u);
}

TEST(json_nesting_within, counts_brackets_outside_strings) {
    EXPECT_TRUE(json_nesting_within(R"({"a":[1,{"b":[]}]})", 4));
    EXPECT_FALSE(json_nesting_within(R"({"a":[1,{"b":[]}]})", 3));
    EXPECT_TRUE(json_nesting_within(R"({"a":"[[[[[[\"[[["})", 1));
    EXPECT_TRUE(json_nesting_within("]]]]{", 1));
}

TEST(json_body, refuses_bodies_nested_too_deeply) {
    // Regression: a body a million levels deep parsed fine, then the first
    // copy or dump() of it (a session's "kernel" member, a notebook's
    // content) recursed a million times and took the gateway down with
    // SIGSEGV. Here it is refused up front, before anything copies it.
    const std::size_t deep = 1'000'000;
    const auto body = R"({"path":"x","kernel":{"name":)" + std::string(deep, '[') + std::string(deep, ']') + "}}";
    EXPECT_EQ(status_of_json_body(body), 400u);
    const auto limit = max_body_json_depth;
    EXPECT_EQ(status_of_json_body("{\"a\":" + std::string(limit - 1, '[') + std::string(limit - 1, ']') + "}"), 200u);
    EXPECT_EQ(status_of_json_body("{\"a\":" + std::string(limit, '[') + std::string(limit, ']') + "}"), 400u);
}

TEST(json_body, empty_invalid_and_non_object_bodies) {
    EXPECT_EQ(with_body(" \r\n").json_body(true), nlohmann::json::object());
    EXPECT_EQ(status_of_json_body(" "), 400u);
    EXPECT_EQ(status_of_json_body("{\"a\":"), 400u);
    EXPECT_EQ(status_of_json_body("[1]"), 400u);
    EXPECT_EQ(status_of_json_body("{\"a\":1}"), 200u);
}

TEST(router, matches_patterns_and_reports_404_405_400) {
    router r;
    int hit = 0;
    r.add(bhttp::verb::get, "/api/kernels/{kernel_id}", [&hit](const request_ptr&, reply_fn) { hit = 1; });
    r.add(bhttp::verb::delete_, "/api/kernels/{kernel_id}", [](const request_ptr&, reply_fn) {});
    r.add(bhttp::verb::get, "/api/contents/{path*}", [](const request_ptr&, reply_fn) {});

    auto m = r.find(bhttp::verb::get, "/api/kernels/abc%2Fdef");
    ASSERT_NE(m.handler, nullptr);
    EXPECT_EQ(m.params.at("kernel_id"), "abc/def");  // %2F stays inside its segment
    EXPECT_EQ(m.pattern, "/api/kernels/{kernel_id}");

    m = r.find(bhttp::verb::post, "/api/kernels/abc");
    EXPECT_EQ(m.handler, nullptr);
    EXPECT_EQ(m.status, 405u);
    EXPECT_EQ(m.allow, "GET, DELETE");

    EXPECT_EQ(r.find(bhttp::verb::get, "/api/kernels/").status, 404u);  // an empty id is no id
    EXPECT_EQ(r.find(bhttp::verb::get, "/api/kernels/a/b").status, 404u);
    EXPECT_EQ(r.find(bhttp::verb::get, "/api/kernels/%zz").status, 400u);
    EXPECT_EQ(r.find(bhttp::verb::get, "/api/kernels/a%00").status, 400u);

    m = r.find(bhttp::verb::get, "/api/contents/k1/dir/a%20b.txt");
    ASSERT_NE(m.handler, nullptr);
    EXPECT_EQ(m.params.at("path"), "k1/dir/a b.txt");
    m = r.find(bhttp::verb::get, "/api/contents");
    ASSERT_NE(m.handler, nullptr);
    EXPECT_EQ(m.params.at("path"), "");
}
