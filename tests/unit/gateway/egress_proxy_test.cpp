// The egress proxy's operator input (egress/proxy.hpp): --egress-resolve
// entries parsed strictly, and the audit record's JSON (no secret in it).
// The proxy itself runs against real sandboxes in tests/integration/test_egress.py.
#include "egress/proxy.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cellgate::egress {
namespace {

TEST(EgressResolve, NameAddressAndOptionalPort) {
    auto [name, e] = parse_resolve_entry("PyPI.Test=127.0.0.1:18443");
    EXPECT_EQ(name, "pypi.test");
    EXPECT_EQ(e.addr.to_string(), "127.0.0.1");
    EXPECT_EQ(e.port, 18443);
    auto [name6, e6] = parse_resolve_entry("mirror.test=[::1]:8080");
    EXPECT_EQ(name6, "mirror.test");
    EXPECT_EQ(e6.addr.to_string(), "::1");
    EXPECT_EQ(e6.port, 8080);
    auto [bare, eb] = parse_resolve_entry("index.test=10.1.2.3");
    EXPECT_EQ(bare, "index.test");
    EXPECT_EQ(eb.port, 0) << "no port: the one asked for";
    EXPECT_EQ(parse_resolve_entry("v6.test=::1").second.addr.to_string(), "::1") << "a bare IPv6 address has no port";
}

TEST(EgressResolve, RefusesWhatIsNotANameAnAddressOrAPort) {
    for (const char* bad : {"pypi.test", "=1.2.3.4", "bad..name=1.2.3.4", "x.test=not-an-ip", "x.test=1.2.3.4:0",
                            "x.test=1.2.3.4:70000", "x.test=[::1", "x.test=[::1]x", "x.test=1.2.3.4:80x"})
        EXPECT_THROW(parse_resolve_entry(bad), std::invalid_argument) << bad;
}

TEST(EgressRecord, JsonSaysTheVerdictAndNothingElseOfTheRequest) {
    connection_record r;
    r.seq = 3;
    r.method = "CONNECT";
    r.host = "pypi.org";
    r.port = 443;
    r.allowed = false;
    r.reason = "denied by pypi.org";
    const auto j = to_json(r);
    EXPECT_EQ(j["verdict"], "refused");
    EXPECT_EQ(j["host"], "pypi.org");
    EXPECT_EQ(j["seq"], 3);
    EXPECT_EQ(j.size(), 14u) << j.dump();
}

}  // namespace
}  // namespace cellgate::egress
