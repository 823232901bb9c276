// The egress proxy's certificate authority (egress/certificate_authority.hpp):
// made once and kept (the key private), leaf certificates that verify
// against it for their host only, and the upstream context's name checks.
// The proxy terminating real TLS runs in tests/integration/test_egress.py.
#include "egress/certificate_authority.hpp"

#include <gtest/gtest.h>

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

namespace cellgate::egress {
namespace {

namespace fs = std::filesystem;

struct temp_dir {
    fs::path path;
    temp_dir() {
        char tmpl[] = "/tmp/cellgate-ca-test-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::unique_ptr<X509, decltype(&X509_free)> parse(const std::string& pem) {
    std::unique_ptr<BIO, decltype(&BIO_free)> b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
    return {PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr), X509_free};
}

// Whether `leaf` chains to `ca` (X509 path validation with server purpose).
bool chains(X509* leaf, X509* ca) {
    std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
    X509_STORE_add_cert(store.get(), ca);
    std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
    X509_STORE_CTX_init(ctx.get(), store.get(), leaf, nullptr);
    X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_SERVER);
    return X509_verify_cert(ctx.get()) == 1;
}

TEST(EgressCertificateAuthority, MadeOnceKeptPrivateAndLoadedAgain) {
    temp_dir d;
    const auto ca = certificate_authority::load_or_create(d.path / "ca");
    struct stat st {};
    ASSERT_EQ(::stat((d.path / "ca" / "ca.key").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << "the CA key is the gateway's alone";
    ASSERT_EQ(::stat((d.path / "ca").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0077, 0u);
    auto cert = parse(ca->certificate_pem());
    ASSERT_TRUE(cert);
    EXPECT_EQ(X509_check_ca(cert.get()), 1);
    EXPECT_EQ(ca->certificate_pem().find("PRIVATE"), std::string::npos);

    const auto again = certificate_authority::load_or_create(d.path / "ca");
    EXPECT_EQ(again->certificate_pem(), ca->certificate_pem()) << "a restarted gateway keeps what sandboxes trust";
    auto leaf = parse(again->leaf_pem("api.example.com"));
    EXPECT_TRUE(chains(leaf.get(), cert.get())) << "the reloaded key signs for the same CA";
}

TEST(EgressCertificateAuthority, ALeafIsForItsHostOnly) {
    temp_dir d;
    const auto ca = certificate_authority::load_or_create(d.path);
    auto root = parse(ca->certificate_pem());
    auto leaf = parse(ca->leaf_pem("api.example.com"));
    ASSERT_TRUE(root && leaf);
    EXPECT_TRUE(chains(leaf.get(), root.get()));
    EXPECT_EQ(X509_check_host(leaf.get(), "api.example.com", 0, 0, nullptr), 1);
    EXPECT_NE(X509_check_host(leaf.get(), "other.example.com", 0, 0, nullptr), 1);
    EXPECT_NE(X509_check_host(leaf.get(), "example.com", 0, 0, nullptr), 1);
    EXPECT_EQ(X509_check_ca(leaf.get()), 0) << "a leaf cannot sign";
    EXPECT_EQ(ca->leaf_pem("api.example.com"), ca->leaf_pem("api.example.com")) << "cached";
    EXPECT_NE(ca->leaf_pem("api.example.com"), ca->leaf_pem("b.example.com"));

    auto ip = parse(ca->leaf_pem("10.1.2.3"));
    EXPECT_EQ(X509_check_ip_asc(ip.get(), "10.1.2.3", 0), 1);
    EXPECT_NE(X509_check_ip_asc(ip.get(), "10.1.2.4", 0), 1);

    // Another gateway's CA does not vouch for this one's leaves.
    temp_dir other_dir;
    const auto other = certificate_authority::load_or_create(other_dir.path);
    EXPECT_FALSE(chains(leaf.get(), parse(other->certificate_pem()).get()));
}

TEST(EgressCertificateAuthority, ManyHostsStayWithinTheCache) {
    temp_dir d;
    const auto ca = certificate_authority::load_or_create(d.path);
    const auto first = ca->leaf_pem("h0.example.com");
    for (std::size_t i = 1; i <= certificate_authority::max_cached_hosts; ++i)
        ca->server_context("h" + std::to_string(i) + ".example.com");
    // The oldest was dropped: asking again makes a new certificate.
    EXPECT_NE(ca->leaf_pem("h0.example.com"), first);
}

TEST(EgressCertificateAuthority, AServerContextServesTheLeafWithTheCAInItsChain) {
    temp_dir d;
    const auto ca = certificate_authority::load_or_create(d.path);
    const auto ctx = ca->server_context("pypi.test");
    X509* served = SSL_CTX_get0_certificate(ctx->native_handle());
    ASSERT_NE(served, nullptr);
    EXPECT_EQ(X509_check_host(served, "pypi.test", 0, 0, nullptr), 1);
    STACK_OF(X509)* chain = nullptr;
    ASSERT_EQ(SSL_CTX_get0_chain_certs(ctx->native_handle(), &chain), 1);
    ASSERT_NE(chain, nullptr);
    EXPECT_EQ(sk_X509_num(chain), 1);
}

TEST(EgressUpstreamTls, VerifiesPeersAndRefusesAMissingRootsFile) {
    const auto ctx = make_upstream_context({});
    EXPECT_EQ(SSL_CTX_get_verify_mode(ctx->native_handle()) & SSL_VERIFY_PEER, SSL_VERIFY_PEER);
    EXPECT_THROW(make_upstream_context({"/nonexistent/ca.pem"}), std::runtime_error);
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx->native_handle()), SSL_free);
    EXPECT_TRUE(verify_upstream_host(ssl.get(), "pypi.org"));
    EXPECT_STREQ(SSL_get_servername(ssl.get(), TLSEXT_NAMETYPE_host_name), "pypi.org");
    EXPECT_STREQ(X509_VERIFY_PARAM_get0_host(SSL_get0_param(ssl.get()), 0), "pypi.org");
    std::unique_ptr<SSL, decltype(&SSL_free)> ip(SSL_new(ctx->native_handle()), SSL_free);
    EXPECT_TRUE(verify_upstream_host(ip.get(), "127.0.0.1"));
}

}  // namespace
}  // namespace cellgate::egress
