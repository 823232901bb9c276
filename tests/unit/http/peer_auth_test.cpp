// Requests between cluster nodes (http/peer_auth.hpp), security review turn
// 3, H4: a node sends a peer no token of a tenant's but its signed word for
// the tenant, bound to that peer, the request and 30 s, and taken once; the
// receiving node believes nothing else. The clock is injected.
#include "http/peer_auth.hpp"
#include "http/hop.hpp"

#include "util/cluster_secret.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace cellgate::http {
namespace {

namespace bhttp = boost::beast::http;

const std::string key(40, 'k');

struct cluster {
    std::int64_t now = 1'800'000'000;
    std::shared_ptr<const util::cluster_secret> secret = std::make_shared<util::cluster_secret>(key);
    peer_auth a{"aaaaaaaa", secret, [this] { return now; }};
    peer_auth b{"bbbbbbbb", secret, [this] { return now; }};
    authenticator tokens{{{"tenant-a-token", "a", "lab users", 0, false}, {"operator-token", "ops", "ops", 0, true}}};
};

bhttp::request_header<> request(bhttp::verb method, std::string target) {
    bhttp::request_header<> h;
    h.method(method);
    h.target(target);
    h.version(11);
    return h;
}

TEST(PeerAuth, ASignedRequestCarriesNoTokenAndVouchesForTheCaller) {
    cluster c;
    auto h = request(bhttp::verb::get, "/api/kernels/bbbbbbbb-0000-4000-8000-000000000000/channels?session_id=s&token=tenant-a-token");
    h.set(bhttp::field::authorization, "token tenant-a-token");
    h.set("X-API-Key", "tenant-a-token");
    h.set(bhttp::field::cookie, "_xsrf=1");
    h.set(hop_header, "aaaaaaaa");
    const identity who{"a", "lab users", false};
    c.a.sign(h, "bbbbbbbb", &who);
    std::ostringstream wire;
    wire << h;
    EXPECT_EQ(wire.str().find("tenant-a-token"), std::string::npos) << wire.str();
    EXPECT_EQ(std::string(h.target()), "/api/kernels/bbbbbbbb-0000-4000-8000-000000000000/channels?session_id=s");
    const auto v = c.b.check(h, c.tokens);
    ASSERT_EQ(v.what, peer_auth::verdict::kind::ok) << v.why;
    ASSERT_TRUE(v.who);
    EXPECT_EQ(v.who->tenant, "a");
    EXPECT_EQ(v.who->token_name, "lab users");
    EXPECT_FALSE(v.who->is_operator);
}

TEST(PeerAuth, ASignatureIsTakenOnceByTheNodeItNamesWithinThirtySeconds) {
    cluster c;
    const identity who{"a", "lab users", false};
    auto h = request(bhttp::verb::get, "/v1/sessions");
    h.set(scope_header, "node");
    c.a.sign(h, "bbbbbbbb", &who);
    // Another node (here a itself, or a third) does not take it: it names b.
    peer_auth third{"cccccccc", c.secret, [&c] { return c.now; }};
    EXPECT_EQ(third.check(h, c.tokens).what, peer_auth::verdict::kind::refused);
    EXPECT_EQ(c.b.check(h, c.tokens).what, peer_auth::verdict::kind::ok);
    const auto replay = c.b.check(h, c.tokens);
    EXPECT_EQ(replay.what, peer_auth::verdict::kind::refused);
    EXPECT_NE(replay.why.find("replay"), std::string::npos) << replay.why;
    // Signed 31 s ago or ahead: refused.
    for (const std::int64_t skew : {-31, 31}) {
        auto late = request(bhttp::verb::get, "/v1/sessions");
        c.a.sign(late, "bbbbbbbb", &who);
        c.now += skew;
        EXPECT_EQ(c.b.check(late, c.tokens).what, peer_auth::verdict::kind::refused) << skew;
        c.now -= skew;
    }
    auto fresh = request(bhttp::verb::get, "/v1/sessions");
    c.a.sign(fresh, "bbbbbbbb", &who);
    c.now += 30;
    EXPECT_EQ(c.b.check(fresh, c.tokens).what, peer_auth::verdict::kind::ok);
}

TEST(PeerAuth, WhatTheSignatureCoversCannotBeChanged) {
    cluster c;
    const identity who{"a", "lab users", false};
    const identity op{"ops", "ops", true};
    auto changed = [&](auto&& change) {
        auto h = request(bhttp::verb::get, "/v1/sessions");
        h.set(scope_header, "node");
        c.a.sign(h, "bbbbbbbb", &who);
        change(h);
        return c.b.check(h, c.tokens).what;
    };
    using kind = peer_auth::verdict::kind;
    EXPECT_EQ(changed([](auto&) {}), kind::ok);
    EXPECT_EQ(changed([](auto& h) { h.target("/v1/sessions/x"); }), kind::refused);
    EXPECT_EQ(changed([](auto& h) { h.method(bhttp::verb::delete_); }), kind::refused);
    EXPECT_EQ(changed([](auto& h) { h.erase(scope_header); }), kind::refused);
    EXPECT_EQ(changed([](auto& h) { h.set(hop_header, "aaaaaaaa"); }), kind::refused);
    EXPECT_EQ(changed([&](auto& h) { h.set(tenant_header, "6f7073.6f7073"); }), kind::refused) << "ops for a";
    EXPECT_EQ(changed([](auto& h) {
                  auto v = std::string(h[peer_header]);
                  v.replace(v.find("to=bbbbbbbb"), 11, "to=cccccccc");
                  h.set(peer_header, v);
              }),
              kind::refused);
    EXPECT_EQ(changed([](auto& h) { h.insert(peer_header, "v1"); }), kind::refused) << "two of them";
    // Signed with another secret: refused.
    peer_auth stranger{"aaaaaaaa", std::make_shared<util::cluster_secret>(std::string(40, 'x')), [&c] { return c.now; }};
    auto h = request(bhttp::verb::get, "/v1/sessions");
    stranger.sign(h, "bbbbbbbb", &op);
    EXPECT_EQ(c.b.check(h, c.tokens).what, kind::refused);
}

TEST(PeerAuth, OnlyASignatureStandsForATenantAndOnlyForOneThisNodeKnows) {
    cluster c;
    using kind = peer_auth::verdict::kind;
    auto plain = request(bhttp::verb::get, "/v1/sessions");
    EXPECT_EQ(c.b.check(plain, c.tokens).what, kind::none);
    // A client narrows what it asks, under its own token: an ordinary request.
    plain.set(scope_header, "node");
    EXPECT_EQ(c.b.check(plain, c.tokens).what, kind::none);
    auto forged = request(bhttp::verb::get, "/v1/sessions");
    forged.set(tenant_header, "61.6c61622075736572");
    EXPECT_EQ(c.b.check(forged, c.tokens).what, kind::refused);
    forged.set(peer_header, "v1 from=aaaaaaaa to=bbbbbbbb at=1800000000 nonce=" + std::string(32, '0') +
                                " sig=" + std::string(64, '0'));
    EXPECT_EQ(c.b.check(forged, c.tokens).what, kind::refused);
    // A tenant the receiving node's tokens do not name.
    const identity nobody{"nobody", "default", false};
    auto h = request(bhttp::verb::get, "/v1/sessions");
    c.a.sign(h, "bbbbbbbb", &nobody);
    EXPECT_EQ(c.b.check(h, c.tokens).what, kind::refused);
    // No tenant at all (the E2B sandbox plane's hop): signed, no identity.
    auto sandbox = request(bhttp::verb::post, "/e2b/process.Process/Start");
    sandbox.set("X-Access-Token", "per-sandbox");
    c.a.sign(sandbox, "bbbbbbbb", nullptr);
    const auto v = c.b.check(sandbox, c.tokens);
    EXPECT_EQ(v.what, kind::ok) << v.why;
    EXPECT_FALSE(v.who);
    EXPECT_EQ(std::string(sandbox["X-Access-Token"]), "per-sandbox");
    EXPECT_EQ(c.b.refused(), 3u);
}

TEST(PeerAuth, TheTokenQueryParameterIsDroppedAndNothingElse) {
    EXPECT_EQ(without_token_query("/a?token=t"), "/a");
    EXPECT_EQ(without_token_query("/a?x=1&token=t&y=2"), "/a?x=1&y=2");
    EXPECT_EQ(without_token_query("/a?token=t&token=u"), "/a");
    EXPECT_EQ(without_token_query("/a?tokens=1"), "/a?tokens=1");
    EXPECT_EQ(without_token_query("/a"), "/a");
}

TEST(ClusterSecret, AFileOthersMayReadOrAShortOneIsRefused) {
    const auto dir = std::filesystem::temp_directory_path() / ("cellgate-secret-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto file = dir / "secret";
    std::ofstream(file) << std::string(64, 'a') << "\n";
    std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                           std::filesystem::perms::group_read);
    EXPECT_THROW(util::cluster_secret::from_file(file), std::runtime_error);
    std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    const auto s = util::cluster_secret::from_file(file);
    EXPECT_EQ(s->sign("p", {"x"}), util::cluster_secret(std::string(64, 'a')).sign("p", {"x"})) << "one newline dropped";
    std::ofstream(file) << std::string(31, 'a') << "\n";
    EXPECT_THROW(util::cluster_secret::from_file(file), std::runtime_error);
    EXPECT_THROW(util::cluster_secret::from_file(dir / "none"), std::runtime_error);
    std::filesystem::remove_all(dir);
    // Fields are length-prefixed: moving a byte from one to the next changes the signature.
    const util::cluster_secret k(key);
    EXPECT_NE(k.sign("p", {"ab", "c"}), k.sign("p", {"a", "bc"}));
    EXPECT_TRUE(k.verify(k.sign("p", {"a"}), "p", {"a"}));
    EXPECT_FALSE(k.verify(k.sign("p", {"a"}).substr(1), "p", {"a"}));
}

}  // namespace
}  // namespace cellgate::http
