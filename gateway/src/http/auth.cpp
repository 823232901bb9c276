#include "http/auth.hpp"

#include "cellgate/protocol/hmac_signer.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>

namespace cellgate::http {

namespace {

std::string sha256(std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), out, &len, EVP_sha256(), nullptr);
    return std::string(reinterpret_cast<const char*>(out), len);
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool iequals_prefix(std::string_view s, std::string_view prefix) {
    if (s.size() < prefix.size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
            return false;
    return true;
}

}  // namespace

authenticator::authenticator(std::vector<token_entry> tokens) {
    for (auto& t : tokens) entries_.push_back({sha256(t.token), {t.tenant, t.name, t.is_operator}});
}

authenticator::result authenticator::check(const request& req, const std::map<std::string, std::string>& query) const {
    std::optional<std::string> given;
    const auto header = req[bhttp::field::authorization];
    if (!header.empty()) {
        const std::string_view h(header.data(), header.size());
        if (iequals_prefix(h, "token ")) given = std::string(trim(h.substr(6)));
        else if (iequals_prefix(h, "bearer ")) given = std::string(trim(h.substr(7)));
        else return {outcome::wrong, {}};
    } else if (const auto it = query.find("token"); it != query.end()) {
        given = it->second;
    }
    if (!given) return {outcome::missing, {}};
    return check_token(*given);
}

authenticator::result authenticator::check_token(std::string_view given) const {
    if (given.empty()) return {outcome::missing, {}};
    const auto digest = sha256(given);
    const entry* found = nullptr;
    for (const auto& e : entries_)  // every entry is compared: no early exit to time
        if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0) found = &e;
    if (found == nullptr) return {outcome::wrong, {}};
    return {outcome::ok, found->who};
}

std::optional<identity> authenticator::known(const std::string& tenant, const std::string& token_name) const {
    for (const auto& e : entries_)
        if (e.who.tenant == tenant && e.who.token_name == token_name) return e.who;
    return std::nullopt;
}

bool origin_allowed(const request& req, const std::vector<std::string>& allowed) {
    if (req.count(bhttp::field::origin) > 1) return false;  // ambiguous: refuse
    const auto origin_field = req[bhttp::field::origin];
    if (origin_field.empty()) return true;
    const std::string origin(origin_field);
    for (const auto& a : allowed)
        if (a == "*" || a == origin) return true;
    // Same origin: the Origin's host[:port] equals the Host header.
    const auto host = std::string(req[bhttp::field::host]);
    const auto scheme_end = origin.find("://");
    return scheme_end != std::string::npos && !host.empty() && origin.substr(scheme_end + 3) == host;
}

std::string make_token() { return protocol::make_kernel_key(); }

}  // namespace cellgate::http
