#include "e2b/sandbox_book.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace cellgate::e2b {

namespace {

constexpr const char* record_kind = "e2b-sandbox";

std::int64_t to_ms(sys_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
sys_clock::time_point from_ms(std::int64_t ms) { return sys_clock::time_point(std::chrono::milliseconds(ms)); }

std::string sha256(std::string_view data) {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), out, &len, EVP_sha256(), nullptr);
    return std::string(reinterpret_cast<const char*>(out), len);
}

}  // namespace

nlohmann::json to_json(const sandbox_record& r) {
    return {{"id", r.id},
            {"tenant", r.tenant},
            {"template_id", r.template_id},
            {"client_id", r.client_id},
            {"envd_token", r.envd_token},
            {"traffic_token", r.traffic_token},
            {"metadata", r.metadata},
            {"env_vars", r.env_vars},
            {"started_ms", to_ms(r.started)},
            {"end_ms", to_ms(r.end_at)}};
}

sandbox_record record_from_json(const nlohmann::json& j) {
    sandbox_record r;
    r.id = j.at("id").get<std::string>();
    r.tenant = j.at("tenant").get<std::string>();
    r.template_id = j.value("template_id", "");
    r.client_id = j.value("client_id", "");
    r.envd_token = j.at("envd_token").get<std::string>();
    r.traffic_token = j.at("traffic_token").get<std::string>();
    r.metadata = j.value("metadata", std::map<std::string, std::string>{});
    r.env_vars = j.value("env_vars", std::map<std::string, std::string>{});
    r.started = from_ms(j.value("started_ms", std::int64_t{0}));
    r.end_at = from_ms(j.value("end_ms", std::int64_t{0}));
    return r;
}

void sandbox_book::put(const sandbox_record& r) {
    {
        std::lock_guard lock(mutex_);
        records_[r.id] = r;
    }
    if (store_) store_->put_record({record_kind, r.id, r.id, to_json(r)});
}

std::optional<sandbox_record> sandbox_book::find(const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (it == records_.end()) return std::nullopt;
    return it->second;
}

std::optional<sandbox_record> sandbox_book::find(const std::string& tenant, const std::string& id) const {
    auto r = find(id);
    if (!r || r->tenant != tenant) return std::nullopt;
    return r;
}

std::vector<sandbox_record> sandbox_book::list(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    std::vector<sandbox_record> out;
    for (const auto& [id, r] : records_)
        if (r.tenant == tenant) out.push_back(r);
    return out;
}

void sandbox_book::forget(const std::string& id) {
    bool had = false;
    {
        std::lock_guard lock(mutex_);
        had = records_.erase(id) > 0;
    }
    if (had && store_) store_->remove_record(record_kind, id);
}

std::vector<sandbox_record> sandbox_book::load() {
    std::vector<sandbox_record> out;
    if (!store_) return out;
    for (const auto& row : store_->records(record_kind)) {
        try {
            out.push_back(record_from_json(row.body));
        } catch (const std::exception&) {
            store_->remove_record(record_kind, row.id);  // unreadable: of no use to anyone
        }
    }
    std::lock_guard lock(mutex_);
    for (const auto& r : out) records_[r.id] = r;
    return out;
}

std::string make_access_token() {
    unsigned char bytes[32];
    if (RAND_bytes(bytes, sizeof bytes) != 1) throw std::runtime_error("no random bytes for an access token");
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (const unsigned char b : bytes) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    return out;
}

bool token_matches(std::string_view given, std::string_view expected) noexcept {
    // Digests first: neither the length nor the content of the expected token
    // shows in the time taken.
    const auto a = sha256(given), b = sha256(expected);
    return !given.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cellgate::e2b
