#include "egress/certificate_authority.hpp"

#include "egress/policy.hpp"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace cellgate::egress {

namespace fs = std::filesystem;

namespace {

struct pkey_free {
    void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct x509_free {
    void operator()(X509* p) const { X509_free(p); }
};
struct bio_free {
    void operator()(BIO* p) const { BIO_free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;
using bio_ptr = std::unique_ptr<BIO, bio_free>;

[[noreturn]] void fail(const std::string& step) {
    char buf[256] = "";
    ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
    ERR_clear_error();
    throw std::runtime_error("egress CA: " + step + ": " + buf);
}

pkey_ptr new_key() {
    pkey_ptr k(EVP_EC_gen("P-256"));
    if (!k) fail("generating a P-256 key");
    return k;
}

void random_serial(X509* x) {
    unsigned char bytes[16];
    if (RAND_bytes(bytes, sizeof bytes) != 1) fail("random serial");
    bytes[0] &= 0x7f;  // positive
    BIGNUM* bn = BN_bin2bn(bytes, sizeof bytes, nullptr);
    if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x))) {
        BN_free(bn);
        fail("serial");
    }
    BN_free(bn);
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (!ext) fail(std::string("extension ") + OBJ_nid2sn(nid));
    const int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    if (!ok) fail("adding an extension");
}

std::string to_pem(X509* x) {
    bio_ptr b(BIO_new(BIO_s_mem()));
    if (!b || !PEM_write_bio_X509(b.get(), x)) fail("writing a certificate");
    char* data = nullptr;
    const long n = BIO_get_mem_data(b.get(), &data);
    return std::string(data, static_cast<std::size_t>(n));
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Written whole or not at all: a temporary file of its mode, then renamed.
void write_file(const fs::path& p, const std::string& data, mode_t mode) {
    const auto tmp = p.string() + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) throw std::runtime_error("egress CA: cannot write " + tmp);
    const bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), p.c_str()) != 0) throw std::runtime_error("egress CA: cannot write " + p.string());
}

}  // namespace

struct certificate_authority::keys {
    pkey_ptr ca_key;
    x509_ptr ca_cert;
    pkey_ptr leaf_key;  // one key for every leaf: made at start, never stored
};

certificate_authority::certificate_authority(std::unique_ptr<keys> k, std::string ca_pem)
    : keys_(std::move(k)), ca_pem_(std::move(ca_pem)) {}

certificate_authority::~certificate_authority() = default;

std::unique_ptr<certificate_authority> certificate_authority::load_or_create(const fs::path& dir) {
    auto k = std::make_unique<keys>();
    const auto key_path = dir / "ca.key", cert_path = dir / "ca.pem";
    std::error_code ec;
    fs::create_directories(dir, ec);
    fs::permissions(dir, fs::perms::owner_all, ec);
    if (fs::exists(key_path) && fs::exists(cert_path)) {
        const auto key_pem = read_file(key_path), cert_pem = read_file(cert_path);
        bio_ptr kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
        bio_ptr cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
        k->ca_key.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
        k->ca_cert.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
        if (!k->ca_key || !k->ca_cert) fail("reading " + key_path.string() + " and " + cert_path.string());
        if (X509_check_private_key(k->ca_cert.get(), k->ca_key.get()) != 1) fail("ca.key does not match ca.pem");
    } else {
        k->ca_key = new_key();
        k->ca_cert.reset(X509_new());
        X509* x = k->ca_cert.get();
        X509_set_version(x, 2);
        random_serial(x);
        X509_gmtime_adj(X509_getm_notBefore(x), -3600);
        X509_gmtime_adj(X509_getm_notAfter(x), 10L * 365 * 24 * 3600);
        X509_NAME* name = X509_get_subject_name(x);
        unsigned char id[4];
        RAND_bytes(id, sizeof id);
        char tag[16];
        std::snprintf(tag, sizeof tag, "%02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
        const std::string cn = std::string("cellgate egress CA ") + tag;
        X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("cellgate"), -1, -1, 0);
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
        X509_set_issuer_name(x, name);
        X509_set_pubkey(x, k->ca_key.get());
        add_extension(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
        add_extension(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
        add_extension(x, x, NID_subject_key_identifier, "hash");
        if (!X509_sign(x, k->ca_key.get(), EVP_sha256())) fail("signing the CA certificate");
        bio_ptr kb(BIO_new(BIO_s_mem()));
        if (!PEM_write_bio_PrivateKey(kb.get(), k->ca_key.get(), nullptr, nullptr, 0, nullptr, nullptr))
            fail("writing the CA key");
        char* data = nullptr;
        const long n = BIO_get_mem_data(kb.get(), &data);
        write_file(key_path, std::string(data, static_cast<std::size_t>(n)), 0600);
        write_file(cert_path, to_pem(x), 0644);
    }
    k->leaf_key = new_key();
    auto pem = to_pem(k->ca_cert.get());
    return std::unique_ptr<certificate_authority>(new certificate_authority(std::move(k), std::move(pem)));
}

certificate_authority::leaf certificate_authority::leaf_for(const std::string& host) {
    const auto now = std::chrono::system_clock::now();
    std::lock_guard lock(mutex_);
    if (const auto it = leaves_.find(host); it != leaves_.end() && now - it->second.made < std::chrono::hours(24))
        return it->second;
    x509_ptr cert(X509_new());
    X509* x = cert.get();
    X509_set_version(x, 2);
    random_serial(x);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), std::chrono::duration_cast<std::chrono::seconds>(leaf_lifetime).count());
    X509_NAME* name = X509_get_subject_name(x);
    const auto cn = host.substr(0, 64);  // CN is at most 64 characters; the SAN carries the whole name
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(keys_->ca_cert.get()));
    X509_set_pubkey(x, keys_->leaf_key.get());
    const bool ip = address::parse(host).has_value();
    const auto san = (ip ? "IP:" : "DNS:") + host;
    add_extension(x, keys_->ca_cert.get(), NID_subject_alt_name, san.c_str());
    add_extension(x, keys_->ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE");
    add_extension(x, keys_->ca_cert.get(), NID_key_usage, "critical,digitalSignature");
    add_extension(x, keys_->ca_cert.get(), NID_ext_key_usage, "serverAuth");
    add_extension(x, keys_->ca_cert.get(), NID_authority_key_identifier, "keyid:always");
    if (!X509_sign(x, keys_->ca_key.get(), EVP_sha256())) fail("signing a certificate for " + host);

    auto ctx = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_server);
    ctx->set_options(boost::asio::ssl::context::default_workarounds | boost::asio::ssl::context::no_sslv2 |
                     boost::asio::ssl::context::no_sslv3 | boost::asio::ssl::context::no_tlsv1 |
                     boost::asio::ssl::context::no_tlsv1_1);
    SSL_CTX* native = ctx->native_handle();
    SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);  // an idle terminated connection keeps no record buffers
    if (SSL_CTX_use_certificate(native, x) != 1 || SSL_CTX_add1_chain_cert(native, keys_->ca_cert.get()) != 1 ||
        SSL_CTX_use_PrivateKey(native, keys_->leaf_key.get()) != 1)
        fail("a server context for " + host);
    if (leaves_.size() >= max_cached_hosts) {
        // Drop the oldest: a hostile cell naming many hosts costs a bounded cache.
        auto oldest = leaves_.begin();
        for (auto it = leaves_.begin(); it != leaves_.end(); ++it)
            if (it->second.made < oldest->second.made) oldest = it;
        leaves_.erase(oldest);
    }
    leaf made{std::move(ctx), to_pem(x), now};
    leaves_[host] = made;
    return made;
}

std::shared_ptr<boost::asio::ssl::context> certificate_authority::server_context(const std::string& host) {
    return leaf_for(host).ctx;
}

std::string certificate_authority::leaf_pem(const std::string& host) { return leaf_for(host).pem; }

std::shared_ptr<boost::asio::ssl::context> make_upstream_context(const std::vector<std::string>& extra_ca_files) {
    auto ctx = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_client);
    ctx->set_options(boost::asio::ssl::context::default_workarounds | boost::asio::ssl::context::no_sslv2 |
                     boost::asio::ssl::context::no_sslv3 | boost::asio::ssl::context::no_tlsv1 |
                     boost::asio::ssl::context::no_tlsv1_1);
    SSL_CTX_set_mode(ctx->native_handle(), SSL_MODE_RELEASE_BUFFERS);
    ctx->set_verify_mode(boost::asio::ssl::verify_peer);
    ctx->set_default_verify_paths();
    for (const auto& f : extra_ca_files) {
        boost::system::error_code ec;
        ctx->load_verify_file(f, ec);
        if (ec) throw std::runtime_error("--egress-upstream-ca " + f + ": " + ec.message());
    }
    return ctx;
}

bool verify_upstream_host(void* handle, const std::string& host) {
    auto* ssl = static_cast<SSL*>(handle);
    if (address::parse(host)) {
        X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
        return X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1;
    }
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    // SSL_set_tlsext_host_name, without its macro's C cast.
    const bool sni = SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                              const_cast<char*>(host.c_str())) == 1;
    return sni && SSL_set1_host(ssl, host.c_str()) == 1;
}

}  // namespace cellgate::egress
