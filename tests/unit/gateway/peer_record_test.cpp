// What a node takes from etcd as a peer (cluster/membership.hpp): security
// review turn 3, H4 — a record whose tag or address is not one is no peer.
#include "cluster/membership.hpp"

#include <gtest/gtest.h>

namespace cellgate::cluster {
namespace {

TEST(PeerRecord, AddressesInTheStrictGrammarOnly) {
    for (const auto* ok : {"10.0.0.5:8888", "node-a.cellgate.svc.cluster.local:8888", "[fd00::2]:80", "localhost:1",
                           "a:65535"})
        EXPECT_TRUE(valid_peer_address(ok)) << ok;
    for (const auto* bad : {"10.0.0.5", ":8888", "10.0.0.5:0", "10.0.0.5:65536", "10.0.0.5:88a", "host:123456",
                            "a b:80", "a;show info:80", "evil\nset server x:80", "-lead.example:80", "trail-.example:80",
                            "a..b:80", "[fd00::2:80", "[]:80", "[fd00::2;x]:80", "user@host:80", "host/path:80", ""})
        EXPECT_FALSE(valid_peer_address(bad)) << bad;
    EXPECT_FALSE(valid_peer_address(std::string(254, 'a') + ":80"));
}

TEST(PeerRecord, TheKeysTagIsTheRecordsAndEightHexDigits) {
    EXPECT_TRUE(valid_peer_record("0badcafe", "0badcafe", "10.0.0.5:8888"));
    EXPECT_FALSE(valid_peer_record("0badcafe", "deadbeef", "10.0.0.5:8888")) << "a record under another node's key";
    EXPECT_FALSE(valid_peer_record("0BADCAFE", "0BADCAFE", "10.0.0.5:8888"));
    EXPECT_FALSE(valid_peer_record("0badcaf", "0badcaf", "10.0.0.5:8888"));
    EXPECT_FALSE(valid_peer_record("0badcafe", "0badcafe", "10.0.0.5:8888;disable server"));
}

}  // namespace
}  // namespace cellgate::cluster
