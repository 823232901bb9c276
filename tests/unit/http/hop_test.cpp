// The internal hop's decisions (http/hop.hpp): which node made the id a
// request names, and what admit() does with a request for another node's id.
#include "http/dispatch.hpp"
#include "http/hop.hpp"
#include "http/peer_auth.hpp"

#include <gtest/gtest.h>

namespace {

using namespace cellgate;
namespace bhttp = boost::beast::http;
using action = http::admission::action;

constexpr const char* ours = "0a0b0c0d";
constexpr const char* theirs = "1a2b3c4d";
constexpr const char* departed = "deadbeef";
const std::string their_id = std::string(theirs) + "-0000-4000-8000-00000000abcd";
const std::string our_id = std::string(ours) + "-0000-4000-8000-00000000abcd";
const auto secret = std::make_shared<util::cluster_secret>(std::string(40, 's'));

bhttp::request_header<> get(std::string target, std::string token = "secret-token-1") {
    bhttp::request_header<> h;
    h.method(bhttp::verb::get);
    h.target(target);
    h.version(11);
    if (!token.empty()) h.set(bhttp::field::authorization, "token " + token);
    return h;
}

std::string tag(const bhttp::request_header<>& h) {
    const auto t = std::string(h.target());
    return http::id_tag_of(h, t.substr(0, t.find('?')));
}

TEST(hop, the_tag_comes_from_an_id_in_the_routed_paths) {
    for (const auto* prefix : {"/api/kernels/", "/api/sessions/", "/api/contents/", "/files/", "/v1/sessions/",
                               "/v1/snapshots/", "/e2b/sandboxes/", "/e2b/v2/sandboxes/"}) {
        EXPECT_EQ(tag(get(prefix + their_id)), theirs) << prefix;
        EXPECT_EQ(tag(get(prefix + their_id + "/channels?session_id=x")), theirs) << prefix;
    }
    EXPECT_EQ(tag(get("/v1/sessions/" + their_id + "/executions/e1/images/0")), theirs);
    // Not an id, not where an id goes, or more than an id in the segment.
    EXPECT_EQ(tag(get("/v1/sessions")), "");
    EXPECT_EQ(tag(get("/api/kernels/" + their_id + "x")), "");
    EXPECT_EQ(tag(get("/api/kernels/1A2B3C4D-0000-4000-8000-00000000abcd")), "");
    EXPECT_EQ(tag(get("/api/kernels/1a2b3c4d_0000-4000-8000-00000000abcd")), "");
    EXPECT_EQ(tag(get("/api/kernelspecs/" + their_id)), "");
    EXPECT_EQ(tag(get("/v2/api/kernels/" + their_id)), "");
}

TEST(hop, a_cluster_nodes_terminal_names_carry_its_tag) {
    const auto name = std::string(theirs) + "-1";
    EXPECT_EQ(tag(get("/api/terminals/" + name)), theirs);
    EXPECT_EQ(tag(get("/terminals/websocket/" + name + "?token=t")), theirs);
    EXPECT_EQ(tag(get("/api/terminals/" + std::string(theirs) + "-my-shell")), theirs);
    // A name without a tag (one gateway alone), a bare tag, or more than a name.
    EXPECT_EQ(tag(get("/api/terminals/1")), "");
    EXPECT_EQ(tag(get("/api/terminals/" + std::string(theirs) + "-")), "");
    EXPECT_EQ(tag(get("/api/terminals/1A2B3C4D-1")), "");
    EXPECT_EQ(tag(get("/api/terminals/" + name + "/x")), "");
    EXPECT_EQ(tag(get("/api/terminals")), "");
}

TEST(hop, the_e2b_sandbox_plane_names_its_sandbox_in_a_header_or_the_host) {
    auto h = get("/files?path=/home/user");
    h.set("E2b-Sandbox-Id", their_id);
    EXPECT_EQ(tag(h), theirs);
    h.set("E2b-Sandbox-Id", their_id + "0");
    EXPECT_EQ(tag(h), "");
    h.erase("E2b-Sandbox-Id");
    h.set(bhttp::field::host, "49999-" + their_id + ".cellgate.example:8888");
    EXPECT_EQ(tag(h), theirs);
    h.set(bhttp::field::host, "-" + their_id + ".cellgate.example");
    EXPECT_EQ(tag(h), "");
    h.set(bhttp::field::host, "49999-" + their_id);
    EXPECT_EQ(tag(h), "");
    h.set(bhttp::field::host, "127.0.0.1:8888");
    EXPECT_EQ(tag(h), "");
}

TEST(hop, the_relayed_head_names_the_hop_and_asks_for_a_close_unless_it_upgrades) {
    const http::peer_auth peers(ours, secret);
    const http::identity who{"acme", "ci", false};
    auto h = get("/v1/sessions/" + their_id + "?token=secret-token-1");
    h.set("X-Forwarded-For", "10.0.0.9");
    h.set(bhttp::field::connection, "keep-alive");
    const auto head = http::hop_request_head(h, "127.0.0.5", peers, theirs, &who);
    EXPECT_EQ(head.rfind("GET /v1/sessions/" + their_id + " HTTP/1.1\r\n", 0), 0u) << head;
    EXPECT_NE(head.find("X-Cellgate-Hop: 0a0b0c0d\r\n"), std::string::npos) << head;
    EXPECT_NE(head.find("X-Forwarded-For: 10.0.0.9, 127.0.0.5\r\n"), std::string::npos) << head;
    // Security review turn 3, H4: the owner gets this node's signed word for the caller, not its token.
    EXPECT_EQ(head.find("secret-token-1"), std::string::npos) << head;
    EXPECT_NE(head.find("X-Cellgate-Tenant: " + std::string("61636d65.6369") + "\r\n"), std::string::npos) << head;
    EXPECT_NE(head.find("X-Cellgate-Peer: v1 from=0a0b0c0d to=1a2b3c4d "), std::string::npos) << head;
    EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos) << head;
    ASSERT_GE(head.size(), 4u);
    EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");

    auto ws = get("/api/kernels/" + their_id + "/channels");
    ws.set(bhttp::field::connection, "Upgrade");
    ws.set(bhttp::field::upgrade, "websocket");
    ws.set(bhttp::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
    ws.set(bhttp::field::sec_websocket_version, "13");
    const auto upgrade = http::hop_request_head(ws, "127.0.0.5", peers, theirs, &who);
    EXPECT_NE(upgrade.find("Connection: Upgrade\r\n"), std::string::npos) << upgrade;
    EXPECT_EQ(upgrade.find("close"), std::string::npos) << upgrade;
}

struct fixture {
    http::router routes;
    http::authenticator auth{{{"secret-token-1", "acme", "ci", 0}}};
    http::server_options options;
    http::hop_rules hops;
    int located = 0;

    fixture() {
        auto handler = [](const http::request_ptr&, http::reply_fn reply) { reply(http::json_response(200, {})); };
        routes.add(bhttp::verb::get, "/v1/sessions/{id}", handler);
        routes.add(bhttp::verb::get, "/api/kernels/{kernel_id}/channels", handler);
        hops.tag = ours;
        hops.peers = std::make_shared<http::peer_auth>(ours, secret);
        hops.locate = [this](const std::string& t) {
            ++located;
            if (t == theirs) return http::hop_owner{http::hop_owner::kind::peer, "127.0.0.1:9001"};
            if (t == departed) return http::hop_owner{http::hop_owner::kind::gone, {}};
            return http::hop_owner{};
        };
    }
    http::admission admit(const bhttp::request_header<>& h) {
        return http::admit({routes, auth, options, &hops}, h, "127.0.0.1");
    }
};

TEST(hop, admit_relays_a_peer_id_after_the_token_check) {
    fixture f;
    auto a = f.admit(get("/v1/sessions/" + their_id));
    EXPECT_EQ(a.what, action::forward);
    EXPECT_EQ(a.forward_to, "127.0.0.1:9001");
    EXPECT_EQ(a.forward_tag, theirs);
    ASSERT_TRUE(a.forward_who);  // vouched for at the owner, in place of the token
    EXPECT_EQ(a.forward_who->tenant, "acme");
    // A WebSocket upgrade is relayed too, before the local kernel lookup.
    auto ws = get("/api/kernels/" + their_id + "/channels");
    ws.set(bhttp::field::connection, "Upgrade");
    ws.set(bhttp::field::upgrade, "websocket");
    EXPECT_EQ(f.admit(ws).what, action::forward);
    // No token, or a wrong one: refused here, nothing is relayed.
    EXPECT_EQ(f.admit(get("/v1/sessions/" + their_id, "")).reply.status, 401u);
    EXPECT_EQ(f.admit(get("/v1/sessions/" + their_id, "nope")).reply.status, 403u);
}

TEST(hop, a_departed_node_id_is_410_and_ours_or_unknown_are_answered_here) {
    fixture f;
    auto gone = f.admit(get("/v1/sessions/" + std::string(departed) + "-0000-4000-8000-00000000abcd"));
    EXPECT_EQ(gone.what, action::respond);
    EXPECT_EQ(gone.reply.status, 410u);
    EXPECT_NE(gone.reply.body.find("left the cluster"), std::string::npos);
    const int before = f.located;
    EXPECT_EQ(f.admit(get("/v1/sessions/" + our_id)).what, action::read_body);
    EXPECT_EQ(f.located, before);  // our own tag is never looked up
    EXPECT_EQ(f.admit(get("/v1/sessions/abababab-0000-4000-8000-00000000abcd")).what, action::read_body);
}

TEST(hop, a_request_that_already_hopped_is_never_relayed_again) {
    fixture f;
    auto h = get("/v1/sessions/" + their_id);
    h.set(http::hop_header, theirs);
    EXPECT_EQ(f.admit(h).what, action::read_body);
}

TEST(hop, a_peers_signed_word_stands_for_the_token_and_nothing_else_does) {
    fixture f;
    // What the owner of `theirs` sends us (this node is `ours`): no token, its signature.
    const http::peer_auth them(theirs, secret);
    const http::identity who{"acme", "ci", false};
    auto h = get("/v1/sessions/" + our_id, "");
    them.sign(h, ours, &who);
    auto a = f.admit(h);
    EXPECT_EQ(a.what, action::read_body);
    EXPECT_EQ(a.ctx->who.tenant, "acme");
    EXPECT_TRUE(a.ctx->vouched);
    EXPECT_EQ(f.admit(h).reply.status, 403u) << "the same signature twice";
    // X-Cellgate-Tenant without a signature, even beside a good token: refused.
    auto forged = get("/v1/sessions/" + our_id);
    forged.set(http::tenant_header, "61636d65.6369");
    EXPECT_EQ(f.admit(forged).reply.status, 403u);
    // Signed with another secret: refused.
    const http::peer_auth stranger(theirs, std::make_shared<util::cluster_secret>(std::string(40, 'x')));
    auto other = get("/v1/sessions/" + our_id, "");
    stranger.sign(other, ours, &who);
    EXPECT_EQ(f.admit(other).reply.status, 403u);
}

TEST(hop, without_a_cluster_every_id_is_answered_here) {
    fixture f;
    EXPECT_EQ(http::admit({f.routes, f.auth, f.options}, get("/v1/sessions/" + their_id), "127.0.0.1").what,
              action::read_body);
    EXPECT_EQ(f.located, 0);
}

}  // namespace
