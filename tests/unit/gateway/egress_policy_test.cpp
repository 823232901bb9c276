// The egress policy (egress/policy.hpp): entries parsed strictly, names,
// wildcards, networks and ports matched as documented, deny over allow,
// and the address classes the DNS-rebinding defence refuses.
#include "egress/policy.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cellgate::egress {
namespace {

std::optional<address> ip(const char* s) { return address::parse(s); }

TEST(EgressPolicy, NamesAndWildcardsOnTheirDefaultPorts) {
    const auto p = policy::parse({"PyPI.org.", "*.pythonhosted.org", "api.example.com:8443"}, {});
    EXPECT_TRUE(p.check("pypi.org", std::nullopt, 443).allowed);
    EXPECT_TRUE(p.check("pypi.org", std::nullopt, 80).allowed);
    EXPECT_FALSE(p.check("pypi.org", std::nullopt, 22).allowed) << "a name without a port is 80 and 443";
    EXPECT_TRUE(p.check("files.pythonhosted.org", std::nullopt, 443).allowed);
    EXPECT_FALSE(p.check("pythonhosted.org", std::nullopt, 443).allowed) << "a wildcard is not its apex";
    EXPECT_FALSE(p.check("evilpythonhosted.org", std::nullopt, 443).allowed);
    EXPECT_TRUE(p.check("API.example.com.", std::nullopt, 8443).allowed);
    EXPECT_FALSE(p.check("api.example.com", std::nullopt, 443).allowed);
    EXPECT_FALSE(p.check("example.com", std::nullopt, 443).allowed);
    EXPECT_EQ(p.check("pypi.org", std::nullopt, 443).rule, "PyPI.org.");
}

TEST(EgressPolicy, NetworksAndDenyWins) {
    const auto p = policy::parse({"10.1.0.0/16", "[fd00::/8]:443", "192.0.2.7:5432", "*.example.com"},
                                 {"10.1.9.0/24", "bad.example.com"});
    EXPECT_TRUE(p.check("10.1.2.3", ip("10.1.2.3"), 1234).allowed);
    EXPECT_FALSE(p.check("10.1.9.3", ip("10.1.9.3"), 1234).allowed);
    EXPECT_EQ(p.check("10.1.9.3", ip("10.1.9.3"), 1234).rule, "10.1.9.0/24");
    EXPECT_TRUE(p.check("fd12::1", ip("fd12::1"), 443).allowed);
    EXPECT_FALSE(p.check("fd12::1", ip("fd12::1"), 80).allowed);
    EXPECT_TRUE(p.check("192.0.2.7", ip("192.0.2.7"), 5432).allowed);
    EXPECT_FALSE(p.check("192.0.2.8", ip("192.0.2.8"), 5432).allowed);
    EXPECT_TRUE(p.check("x.example.com", ip("10.1.2.3"), 443).allowed);
    EXPECT_FALSE(p.check("bad.example.com", std::nullopt, 443).allowed);
    // A name's resolved address meets the network rules too.
    EXPECT_FALSE(p.check("y.example.com", ip("10.1.9.1"), 443).allowed);
    EXPECT_TRUE(p.check("10.1.2.3", ip("::ffff:10.1.2.3"), 9).allowed) << "an IPv4-mapped address is that IPv4 address";
    EXPECT_FALSE(policy{}.check("anything.com", std::nullopt, 443).allowed) << "no rules: nothing is allowed";
    // Found by the fuzzer: a malformed name must not ride on a wildcard.
    for (const char* bad : {"`.example.com", "a b.example.com", "x/.example.com", "#.example.com"})
        EXPECT_FALSE(p.check(bad, std::nullopt, 443).allowed) << bad;
}

TEST(EgressPolicy, BadEntriesSayWhy) {
    for (const char* bad : {"", "*.com", "exa mple.com", "-bad.com", "bad-.com", "host:0", "host:99999", "10.0.0.0/33",
                            "[fd00::/8", "[fd00::]x", "fd00::/200", "a..b", "*.", "éxample.com", "1.2.3.4/x"}) {
        try {
            parse_rule(bad);
            ADD_FAILURE() << "accepted: " << bad;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("network rule"), std::string::npos);
        }
    }
    EXPECT_THROW(policy::parse(std::vector<std::string>(257, "a.com"), {}), std::invalid_argument);
}

TEST(EgressPolicy, InternalAddresses) {
    for (const char* internal : {"127.0.0.1", "10.2.3.4", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
                                 "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
                                 "fd00::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "ff02::1"})
        EXPECT_TRUE(is_internal(*ip(internal))) << internal;
    for (const char* external : {"1.1.1.1", "8.8.8.8", "172.32.0.1", "93.184.216.34", "2606:4700::1111"})
        EXPECT_FALSE(is_internal(*ip(external))) << external;
    EXPECT_EQ(ip("::ffff:10.0.0.1")->to_string(), "10.0.0.1");
    EXPECT_EQ(ip("fd00::1")->to_string(), "fd00::1");
    EXPECT_FALSE(ip("example.com"));
}

// Review turn 3, L4: the IPv6 transition forms are judged by the IPv4 they embed.
TEST(EgressPolicy, L4TransitionAddressesAreJudgedByTheirEmbeddedIpv4) {
    for (const char* internal : {"::7f00:1", "::a00:1", "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "64:ff9b::7f00:1",
                                 "64:ff9b::a00:1", "64:ff9b::c0a8:101", "64:ff9b:1::808:808", "64:ff9b:1:2::1",
                                 "2002:7f00:1::", "2002:a00:1::1", "2002:a9fe:a9fe::1", "2002:c0a8:101:1::1"})
        EXPECT_TRUE(is_internal(*ip(internal))) << internal;
    // A public IPv4 inside stays public: NAT64 to the Internet still works.
    for (const char* external : {"::808:808", "::ffff:0:808:808", "64:ff9b::808:808", "64:ff9b::5db8:d822",
                                 "2002:808:808::1"})
        EXPECT_FALSE(is_internal(*ip(external))) << external;
    EXPECT_EQ(embedded_ipv4(*ip("2002:a00:1::1"))->to_string(), "10.0.0.1");
    EXPECT_EQ(embedded_ipv4(*ip("64:ff9b::7f00:1"))->to_string(), "127.0.0.1");
    EXPECT_FALSE(embedded_ipv4(*ip("::1")));
    EXPECT_FALSE(embedded_ipv4(*ip("2606:4700::1111")));
}

// Review turn 3, M1: every layer judges a name before it is looked up.
TEST(EgressPolicy, M1ANameOutsideAnyLayerIsNeverLookedUp) {
    const auto session = policy::parse({"pypi.org", "1.1.1.1"}, {});
    const auto tenant_max = policy::parse({"pypi.org"}, {});
    // The session's CIDR entry alone no longer lets a name past the tenant's maximum.
    auto v = judge_name({session, tenant_max}, "secret123.attacker.example", 443);
    EXPECT_FALSE(v.look_up);
    EXPECT_NE(v.refusal.find("tenant"), std::string::npos) << v.refusal;
    EXPECT_TRUE(judge_name({session, tenant_max}, "pypi.org", 443).look_up);
    // Every layer with a network entry for the port: its addresses may still decide.
    const auto tenant_cidr = policy::parse({"pypi.org", "1.0.0.0/8"}, {});
    EXPECT_TRUE(judge_name({session, tenant_cidr}, "one.example", 443).look_up);
    // ... but a network entry for another port cannot.
    const auto tenant_5432 = policy::parse({"10.0.0.0/8:5432"}, {});
    EXPECT_FALSE(judge_name({policy::parse({"10.0.0.0/8"}, {}), tenant_5432}, "db.example", 443).look_up);
    EXPECT_TRUE(judge_name({policy::parse({"10.0.0.0/8"}, {}), tenant_5432}, "db.example", 5432).look_up);
    // A deny entry that names it: never, whatever networks allow.
    const auto denying = policy::parse({"0.0.0.0/0"}, {"*.attacker.example"});
    v = judge_name({denying}, "x.attacker.example", 443);
    EXPECT_FALSE(v.look_up);
    EXPECT_NE(v.refusal.find("*.attacker.example"), std::string::npos);
    // The session's own layer without a network entry: no lookup.
    EXPECT_FALSE(judge_name({policy::parse({"pypi.org"}, {})}, "other.example", 443).look_up);
    EXPECT_FALSE(judge_name({}, "pypi.org", 443).look_up);
}

}  // namespace
}  // namespace cellgate::egress
