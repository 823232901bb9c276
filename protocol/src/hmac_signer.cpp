#include "cellgate/protocol/hmac_signer.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <stdexcept>

namespace cellgate::protocol {
namespace {

constexpr std::size_t digest_bytes = 32;

std::string to_hex(const unsigned char* data, std::size_t size) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(size * 2, '\0');
    for (std::size_t i = 0; i < size; ++i) {
        out[2 * i] = digits[data[i] >> 4];
        out[2 * i + 1] = digits[data[i] & 0x0f];
    }
    return out;
}

EVP_MAC* hmac_algorithm() {
    // Fetched once; EVP_MAC objects are safe to share between threads.
    static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    return mac;
}

}  // namespace

struct hmac_signer::state {
    // A keyed context that is duplicated for each message, so signing never
    // re-derives the key schedule and the signer is safe to use from many threads.
    EVP_MAC_CTX* keyed = nullptr;
    ~state() { EVP_MAC_CTX_free(keyed); }
};

hmac_signer::hmac_signer(std::string_view key) : state_(std::make_unique<state>()) {
    if (key.empty()) return;
    EVP_MAC* mac = hmac_algorithm();
    if (mac == nullptr) throw std::runtime_error("hmac_signer: OpenSSL has no HMAC");
    state_->keyed = EVP_MAC_CTX_new(mac);
    char digest_name[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
        OSSL_PARAM_construct_end()};
    if (state_->keyed == nullptr ||
        EVP_MAC_init(state_->keyed, reinterpret_cast<const unsigned char*>(key.data()),
                     key.size(), params) != 1)
        throw std::runtime_error("hmac_signer: cannot initialise HMAC-SHA256");
    enabled_ = true;
}

hmac_signer::~hmac_signer() = default;
hmac_signer::hmac_signer(hmac_signer&&) noexcept = default;
hmac_signer& hmac_signer::operator=(hmac_signer&&) noexcept = default;

namespace {

bool digest(EVP_MAC_CTX* keyed, std::array<unsigned char, digest_bytes>& out,
            std::string_view header, std::string_view parent, std::string_view metadata,
            std::string_view content) {
    EVP_MAC_CTX* ctx = EVP_MAC_CTX_dup(keyed);
    if (ctx == nullptr) return false;
    bool ok = true;
    for (std::string_view part : {header, parent, metadata, content})
        ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(part.data()),
                                  part.size()) == 1;
    std::size_t written = 0;
    ok = ok && EVP_MAC_final(ctx, out.data(), &written, out.size()) == 1 &&
         written == digest_bytes;
    EVP_MAC_CTX_free(ctx);
    return ok;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::string hmac_signer::sign(std::string_view header, std::string_view parent_header,
                              std::string_view metadata, std::string_view content) const {
    if (!enabled_) return {};
    std::array<unsigned char, digest_bytes> out{};
    if (!digest(state_->keyed, out, header, parent_header, metadata, content))
        throw std::runtime_error("hmac_signer: HMAC computation failed");
    return to_hex(out.data(), out.size());
}

bool hmac_signer::verify(std::string_view signature, std::string_view header,
                         std::string_view parent_header, std::string_view metadata,
                         std::string_view content) const {
    if (!enabled_) return signature.empty();
    if (signature.size() != signature_hex_chars) return false;
    std::array<unsigned char, digest_bytes> given{};
    int bad = 0;
    for (std::size_t i = 0; i < digest_bytes; ++i) {
        const int hi = hex_value(signature[2 * i]);
        const int lo = hex_value(signature[2 * i + 1]);
        bad |= (hi | lo) & 0x100;  // -1 has every bit set
        given[i] = static_cast<unsigned char>(((hi & 0xf) << 4) | (lo & 0xf));
    }
    std::array<unsigned char, digest_bytes> expected{};
    if (!digest(state_->keyed, expected, header, parent_header, metadata, content)) return false;
    return (CRYPTO_memcmp(given.data(), expected.data(), digest_bytes) == 0) && bad == 0;
}

std::string make_kernel_key() {
    std::array<unsigned char, 32> bytes{};
    if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1)
        throw std::runtime_error("make_kernel_key: the OS random source failed");
    return to_hex(bytes.data(), bytes.size());
}

}  // namespace cellgate::protocol
