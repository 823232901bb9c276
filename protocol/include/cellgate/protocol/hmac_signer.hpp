#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace cellgate::protocol {

// Signs and verifies Jupyter messages with HMAC-SHA256 over the header,
// parent_header, metadata and content parts (buffers are not signed), as the
// messaging spec defines. An empty key disables signing: sign() returns "" and
// verify() accepts only an empty signature.
class hmac_signer {
public:
    explicit hmac_signer(std::string_view key);
    ~hmac_signer();
    hmac_signer(const hmac_signer&) = delete;
    hmac_signer& operator=(const hmac_signer&) = delete;
    hmac_signer(hmac_signer&&) noexcept;
    hmac_signer& operator=(hmac_signer&&) noexcept;

    // Lower-case hex digest (64 characters), or "" when signing is disabled.
    std::string sign(std::string_view header, std::string_view parent_header,
                     std::string_view metadata, std::string_view content) const;

    // Length is checked first, then the digest is compared in constant time.
    bool verify(std::string_view signature, std::string_view header,
                std::string_view parent_header, std::string_view metadata,
                std::string_view content) const;

    bool enabled() const noexcept { return enabled_; }

    static constexpr std::size_t signature_hex_chars = 64;

private:
    struct state;
    std::unique_ptr<state> state_;
    bool enabled_ = false;
};

// Random key material for a new kernel: 32 bytes from the OS, hex encoded.
std::string make_kernel_key();

}  // namespace cellgate::protocol
