// http::admit and http::dispatch: what the gateway decides from a request's
// headers alone, before any body byte is read, and how a handler's failure
// becomes a JSON error.
#include "http/dispatch.hpp"
#include "util/api_error.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace {

using namespace cellgate;
namespace bhttp = boost::beast::http;
using action = http::admission::action;

struct fixture {
    http::router routes;
    http::authenticator auth{{{"secret-token-1", "acme", "ci", 0}}};
    http::server_options options;
    int calls = 0;

    fixture() {
        auto handler = [this](const http::request_ptr&, http::reply_fn reply) {
            ++calls;
            reply(http::json_response(200, {{"ok", true}}));
        };
        routes.add(bhttp::verb::get, "/api", handler);
        routes.add(bhttp::verb::get, "/healthz", handler);
        routes.add(bhttp::verb::post, "/v1/sessions", handler);
        routes.add(bhttp::verb::get, "/api/kernels/{kernel_id}/channels", handler);
        routes.add(bhttp::verb::post, "/throws/{kind}", [](const http::request_ptr& r, http::reply_fn) {
            if (r->param("kind") == "api") throw api_exception(409, "busy");
            if (r->param("kind") == "json") (void)nlohmann::json::parse("[1]").at(0).get<std::string>();
            throw std::runtime_error("/var/lib/cellgate/secret path");
        });
        routes.add_upload(bhttp::verb::put, "/v1/sessions/{id}/files/{path*}", {});
        // Beside the plain POST /v1/sessions: archives and forms only.
        routes.add_upload(bhttp::verb::post, "/v1/sessions", {{}, {}, {"application/x-tar", "multipart/form-data"}});
        routes.add_socket("/terminals/websocket/{name}", [](const http::request_ptr&) { return http::socket_accept{}; });
        options.max_body_bytes = 1000;
        options.max_public_body_bytes = 10;
    }
    http::admission admit(const bhttp::request_header<>& h) { return http::admit({routes, auth, options}, h, "127.0.0.1"); }
};

bhttp::request_header<> header(bhttp::verb method, std::string target, std::string token = {},
                               std::optional<std::uint64_t> length = {}) {
    bhttp::request_header<> h;
    h.method(method);
    h.target(target);
    h.version(11);
    if (!token.empty()) h.set(bhttp::field::authorization, "token " + token);
    if (length) h.set(bhttp::field::content_length, std::to_string(*length));
    return h;
}

bhttp::request_header<> upgrade(std::string target) {
    auto h = header(bhttp::verb::get, std::move(target));
    h.set(bhttp::field::upgrade, "websocket");
    h.set(bhttp::field::connection, "upgrade");
    return h;
}

nlohmann::json body_of(const http::response& r) { return nlohmann::json::parse(r.body); }

TEST(admit, refuses_a_missing_token_before_the_body_and_closes_after) {
    fixture f;
    const auto a = f.admit(header(bhttp::verb::post, "/v1/sessions", {}, 200u << 20));
    EXPECT_EQ(a.what, action::respond);
    EXPECT_EQ(a.reply.status, 401u);
    EXPECT_TRUE(a.close_after);  // the 200 MiB that follow are never read
    EXPECT_TRUE(body_of(a.reply)["message"].is_string());
}

TEST(admit, refuses_a_wrong_token_with_403_and_keeps_a_bodyless_connection) {
    fixture f;
    const auto a = f.admit(header(bhttp::verb::post, "/v1/sessions", "nope"));
    EXPECT_EQ(a.reply.status, 403u);
    EXPECT_FALSE(a.close_after);
}

TEST(admit, checks_the_declared_length_after_the_token) {
    fixture f;
    auto a = f.admit(header(bhttp::verb::post, "/v1/sessions", "secret-token-1", 1001));
    EXPECT_EQ(a.reply.status, 413u);
    EXPECT_TRUE(a.close_after);
    a = f.admit(header(bhttp::verb::post, "/v1/sessions", "secret-token-1", 1000));
    EXPECT_EQ(a.what, action::read_body);
    EXPECT_EQ(a.body_limit, 1000u);
    EXPECT_EQ(a.ctx->who.tenant, "acme");
}

TEST(admit, public_routes_get_only_a_small_body) {
    fixture f;
    auto a = f.admit(header(bhttp::verb::get, "/healthz", {}, 11));
    EXPECT_EQ(a.reply.status, 413u);
    a = f.admit(header(bhttp::verb::get, "/healthz"));
    EXPECT_EQ(a.what, action::read_body);
    EXPECT_EQ(a.body_limit, 10u);
    EXPECT_TRUE(a.ctx->who.tenant.empty());
}

TEST(admit, chunked_bodies_are_read_under_the_same_limit) {
    fixture f;
    auto h = header(bhttp::verb::post, "/v1/sessions");
    h.set(bhttp::field::transfer_encoding, "chunked");
    auto a = f.admit(h);
    EXPECT_EQ(a.reply.status, 401u);
    EXPECT_TRUE(a.close_after);
    h.set(bhttp::field::authorization, "token secret-token-1");
    a = f.admit(h);
    EXPECT_EQ(a.what, action::read_body);
    EXPECT_EQ(a.body_limit, 1000u);
}

TEST(admit, unknown_paths_wrong_methods_and_bad_escapes_are_answered_from_the_headers) {
    fixture f;
    EXPECT_EQ(f.admit(header(bhttp::verb::get, "/nowhere")).reply.status, 404u);
    const auto wrong = f.admit(header(bhttp::verb::delete_, "/v1/sessions"));
    EXPECT_EQ(wrong.reply.status, 405u);
    ASSERT_FALSE(wrong.reply.headers.empty());
    EXPECT_EQ(wrong.reply.headers[0].first, "Allow");
    EXPECT_EQ(f.admit(header(bhttp::verb::get, "/api/%zz")).reply.status, 400u);
    EXPECT_EQ(f.admit(header(bhttp::verb::options, "/v1/sessions")).reply.status, 204u);
    EXPECT_EQ(f.calls, 0);
}

TEST(admit, uploads_need_a_token_like_any_private_route) {
    fixture f;
    EXPECT_EQ(f.admit(header(bhttp::verb::put, "/v1/sessions/x/files/a.csv", {}, 5)).reply.status, 401u);
    const auto a = f.admit(header(bhttp::verb::put, "/v1/sessions/x/files/a.csv", "secret-token-1", 5));
    EXPECT_EQ(a.what, action::upload);
    EXPECT_NE(a.upload, nullptr);
    EXPECT_EQ(a.ctx->param("path"), "a.csv");
}

TEST(admit, an_upload_beside_a_plain_route_takes_only_its_content_types) {
    fixture f;
    auto with_type = [](std::string type) {
        auto h = header(bhttp::verb::post, "/v1/sessions", "secret-token-1", 50);
        if (!type.empty()) h.set(bhttp::field::content_type, type);
        return h;
    };
    for (const auto* type : {"application/x-tar", "Application/X-Tar", "multipart/form-data; boundary=abc",
                             "multipart/form-data ;boundary=x"}) {
        const auto a = f.admit(with_type(type));
        EXPECT_EQ(a.what, action::upload) << type;
        EXPECT_NE(a.upload, nullptr) << type;
    }
    for (const auto* type : {"application/json", "", "text/plain", "application/x-tarball", "multipart/mixed"}) {
        const auto a = f.admit(with_type(type));
        EXPECT_EQ(a.what, action::read_body) << type;
        EXPECT_EQ(a.body_limit, 1000u) << type;  // the plain route's limit, not the upload's
    }
    // Over the plain limit as JSON: refused from the headers; as an archive: streamed.
    auto big = with_type("application/json");
    big.set(bhttp::field::content_length, "5000");
    EXPECT_EQ(f.admit(big).reply.status, 413u);
    big.set(bhttp::field::content_type, "application/x-tar");
    EXPECT_EQ(f.admit(big).what, action::upload);
}

TEST(admit, websocket_upgrades_only_on_the_kernel_channels) {
    fixture f;
    auto h = upgrade("/api/kernels/k1/channels?session_id=s&token=secret-token-1");
    auto a = f.admit(h);
    EXPECT_EQ(a.what, action::upgrade);
    EXPECT_EQ(a.ctx->query_value("session_id"), "s");
    h.target("/api?token=secret-token-1");
    a = f.admit(h);
    EXPECT_EQ(a.reply.status, 400u);
}

TEST(admit, a_socket_endpoint_upgrades_after_the_token_and_a_plain_get_there_is_a_400) {
    fixture f;
    auto h = upgrade("/terminals/websocket/1");
    auto a = f.admit(h);
    EXPECT_EQ(a.reply.status, 401u);  // no token: refused before any handler
    h.target("/terminals/websocket/1?token=secret-token-1");
    a = f.admit(h);
    ASSERT_EQ(a.what, action::socket);
    EXPECT_NE(a.socket, nullptr);
    EXPECT_EQ(a.ctx->param("name"), "1");
    EXPECT_EQ(a.ctx->who.tenant, "acme");
    // Without the upgrade: an ordinary route whose handler says what to do.
    a = f.admit(header(bhttp::verb::get, "/terminals/websocket/1", "secret-token-1"));
    ASSERT_EQ(a.what, action::read_body);
    unsigned status = 0;
    http::dispatch(a, [&status](http::response r) { status = r.status; });
    EXPECT_EQ(status, 400u);
}

TEST(dispatch, maps_exceptions_to_json_errors_without_internals) {
    fixture f;
    auto reply_of = [&](const std::string& kind) {
        const auto a = f.admit(header(bhttp::verb::post, "/throws/" + kind, "secret-token-1"));
        EXPECT_EQ(a.what, action::read_body);
        std::optional<http::response> got;
        int replies = 0;
        http::dispatch(a, [&](http::response r) {
            ++replies;
            got = std::move(r);
        });
        EXPECT_EQ(replies, 1);
        return *got;
    };
    EXPECT_EQ(reply_of("api").status, 409u);
    EXPECT_EQ(reply_of("json").status, 400u);
    const auto internal = reply_of("other");
    EXPECT_EQ(internal.status, 500u);
    EXPECT_EQ(internal.body.find("/var/lib"), std::string::npos);
    EXPECT_EQ(body_of(internal)["reason"], "Internal Server Error");
}

}  // namespace
