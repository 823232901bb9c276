#include "http/peer_auth.hpp"

#include "cellgate/protocol/hmac_signer.hpp"
#include "http/hop.hpp"
#include "util/encoding.hpp"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

namespace cellgate::http {

namespace bhttp = boost::beast::http;

namespace {

constexpr std::string_view purpose = "cellgate peer request v1";

bool lower_hex(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string value_of(const bhttp::request_header<>& h, const char* name) {
    const auto v = h[name];
    return std::string(v.data(), v.size());
}

std::optional<std::string> hex_decode(std::string_view hex) {
    if (hex.size() % 2 != 0 || hex.size() > 1024 || !lower_hex(hex)) return std::nullopt;
    std::string out;
    for (std::size_t i = 0; i < hex.size(); i += 2) {
        auto digit = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
        out += static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
    }
    return out;
}

std::string vouch(const identity& who) { return cellgate::hex_encode(who.tenant) + "." + cellgate::hex_encode(who.token_name); }

// "v1 from=… to=… at=… nonce=… sig=…": the fields into `f`, or false when malformed.
struct peer_fields {
    std::string from, to, at, nonce, sig;
};
bool parse(std::string_view v, peer_fields& f) {
    if (v.substr(0, 3) != "v1 ") return false;
    v.remove_prefix(3);
    while (!v.empty()) {
        const auto space = v.find(' ');
        const auto item = v.substr(0, space);
        v = space == std::string_view::npos ? std::string_view() : v.substr(space + 1);
        const auto eq = item.find('=');
        if (eq == std::string_view::npos) return false;
        const auto key = item.substr(0, eq);
        const std::string value(item.substr(eq + 1));
        std::string* slot = key == "from" ? &f.from : key == "to" ? &f.to : key == "at" ? &f.at
                            : key == "nonce" ? &f.nonce : key == "sig" ? &f.sig : nullptr;
        if (slot == nullptr || !slot->empty() || value.empty()) return false;
        *slot = value;
    }
    return f.from.size() == 8 && lower_hex(f.from) && f.to.size() == 8 && lower_hex(f.to) && f.nonce.size() == 32 &&
           lower_hex(f.nonce) && f.sig.size() == 64 && lower_hex(f.sig) && !f.at.empty() && f.at.size() <= 12 &&
           std::all_of(f.at.begin(), f.at.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string without_token_query(std::string_view target) {
    const auto q = target.find('?');
    if (q == std::string_view::npos) return std::string(target);
    std::string out(target.substr(0, q));
    auto rest = target.substr(q + 1);
    char sep = '?';
    while (true) {
        const auto amp = rest.find('&');
        const auto item = rest.substr(0, amp);
        const auto name = item.substr(0, item.find('='));
        if (name != "token" && !item.empty()) {
            out += sep;
            out += item;
            sep = '&';
        }
        if (amp == std::string_view::npos) break;
        rest = rest.substr(amp + 1);
    }
    return out;
}

peer_auth::peer_auth(std::string tag, std::shared_ptr<const util::cluster_secret> secret, clock_fn now)
    : tag_(std::move(tag)), secret_(std::move(secret)), now_(now ? std::move(now) : clock_fn(unix_now)) {
    if (!secret_) throw std::invalid_argument("peer authentication needs the cluster secret");
}

std::string peer_auth::mac(std::string_view from, std::string_view to, std::string_view at, std::string_view nonce,
                           std::string_view method, std::string_view target, std::string_view hop,
                           std::string_view scope, std::string_view tenant) const {
    return secret_->sign(purpose, {from, to, at, nonce, method, target, hop, scope, tenant});
}

std::vector<std::pair<std::string, std::string>> peer_auth::headers(const std::string& method,
                                                                    const std::string& target,
                                                                    const std::string& to_tag, const std::string& hop,
                                                                    const std::string& scope,
                                                                    const identity* who) const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!hop.empty()) out.emplace_back(hop_header, hop);
    if (!scope.empty()) out.emplace_back(scope_header, scope);
    const auto tenant = who != nullptr && !who->tenant.empty() ? vouch(*who) : std::string();
    if (!tenant.empty()) out.emplace_back(tenant_header, tenant);
    const auto at = std::to_string(now_());
    const auto nonce = protocol::make_kernel_key().substr(0, 32);
    const auto sig = mac(tag_, to_tag, at, nonce, method, target, hop, scope, tenant);
    out.emplace_back(peer_header, "v1 from=" + tag_ + " to=" + to_tag + " at=" + at + " nonce=" + nonce + " sig=" + sig);
    return out;
}

void peer_auth::sign(bhttp::request_header<>& h, const std::string& to_tag, const identity* who) const {
    for (const auto field : {bhttp::field::authorization, bhttp::field::cookie}) h.erase(field);
    for (const char* name : {"X-API-Key", peer_header, tenant_header}) h.erase(name);
    h.target(without_token_query(std::string_view(h.target().data(), h.target().size())));
    const auto method = std::string(h.method_string());
    const auto target = std::string(h.target());
    for (auto& [name, value] : headers(method, target, to_tag, value_of(h, hop_header), value_of(h, scope_header), who))
        h.set(name, value);
}

peer_auth::verdict peer_auth::refuse(std::string why) {
    const auto n = ++refused_;
    if (n % 100 == 1) spdlog::warn("cluster: refused a request as a peer's ({} so far): {}", n, why);
    return {verdict::kind::refused, std::nullopt, std::move(why)};
}

bool peer_auth::remember(const std::string& sig, std::int64_t now) {
    std::lock_guard lock(mutex_);
    while (!order_.empty() && order_.front().first < now) {
        seen_.erase(order_.front().second);
        order_.pop_front();
    }
    if (seen_.size() >= max_remembered) return false;
    if (!seen_.insert(sig).second) return false;
    // A signature is good until its `at` is max_skew old; remember it past that.
    order_.emplace_back(now + 2 * max_skew.count() + 1, sig);
    return true;
}

peer_auth::verdict peer_auth::check(const bhttp::request_header<>& h, const authenticator& auth) {
    const std::array<const char*, 4> names = {peer_header, hop_header, scope_header, tenant_header};
    bool any = false;
    for (const char* name : names) {
        const auto n = h.count(name);
        if (n > 1) return refuse(std::string("more than one ") + name);
        any = any || n == 1;
    }
    if (!any) return {};
    // A client may narrow what it asks (X-Cellgate-Scope: node, its own
    // part; X-Cellgate-Hop, no relay) under its own token; only a node's
    // signature stands for a tenant.
    if (h.count(peer_header) == 0 && h.count(tenant_header) == 0) return {};
    peer_fields f;
    const auto* fields = parse(value_of(h, peer_header), f) ? &f : nullptr;
    if (fields == nullptr)
        return refuse("X-Cellgate-Tenant is a cluster node's word, and this request has no well-formed "
                      "X-Cellgate-Peer");
    if (fields->to != tag_) return refuse("signed for node " + fields->to + ", not this one (" + tag_ + ")");
    if (fields->from == tag_) return refuse("signed as this node's own");
    const auto now = now_();
    const auto at = std::stoll(fields->at);
    if (at < now - max_skew.count() || at > now + max_skew.count())
        return refuse("signed at " + fields->at + ", more than 30 s from this node's clock (" + std::to_string(now) + ")");
    const auto tenant = value_of(h, tenant_header);
    const auto expected = mac(fields->from, fields->to, fields->at, fields->nonce, std::string(h.method_string()),
                              std::string(h.target()), value_of(h, hop_header), value_of(h, scope_header), tenant);
    if (fields->sig.size() != expected.size() ||
        CRYPTO_memcmp(fields->sig.data(), expected.data(), expected.size()) != 0)
        return refuse("the signature of node " + fields->from + "'s request is not the cluster secret's");
    if (!remember(fields->sig, now)) return refuse("a signature seen before (a replay), or too many at once");
    verdict v{verdict::kind::ok, std::nullopt, {}};
    if (!tenant.empty()) {
        const auto dot = tenant.find('.');
        const auto name = dot == std::string::npos ? std::nullopt : hex_decode(tenant.substr(0, dot));
        const auto token_name = dot == std::string::npos ? std::nullopt : hex_decode(tenant.substr(dot + 1));
        auto who = name && token_name ? auth.known(*name, *token_name) : std::nullopt;
        if (!who) return refuse("node " + fields->from + " vouches for a tenant this node's tokens do not name");
        v.who = std::move(who);
    }
    ++accepted_;
    return v;
}

void peer_auth::render(std::string& out) const {
    out += "# HELP cellgate_cluster_peer_requests_total requests that claimed to come from a cluster node\n"
           "# TYPE cellgate_cluster_peer_requests_total counter\n"
           "cellgate_cluster_peer_requests_total{outcome=\"accepted\"} " +
           std::to_string(accepted_.load()) +
           "\n"
           "cellgate_cluster_peer_requests_total{outcome=\"refused\"} " +
           std::to_string(refused_.load()) + "\n";
}

}  // namespace cellgate::http
