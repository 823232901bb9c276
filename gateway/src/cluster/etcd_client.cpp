#include "cluster/etcd_client.hpp"

#include "util/encoding.hpp"
#include "util/http_client.hpp"

#include <boost/asio/ssl/context.hpp>


namespace cellgate::cluster {

namespace {

std::string b64(const std::string& s) { return cellgate::base64_encode(s); }

std::string unb64(const nlohmann::json& j) {
    if (!j.is_string()) return {};
    return cellgate::base64_decode(j.get<std::string>()).value_or("");
}

std::int64_t as_int(const nlohmann::json& j) {
    // The gateway writes 64-bit integers as strings.
    if (j.is_number_integer()) return j.get<std::int64_t>();
    if (j.is_string()) {
        try {
            return std::stoll(j.get<std::string>());
        } catch (const std::exception&) {
        }
    }
    return 0;
}

// One entry of a range's "kvs".
etcd_client::key_value to_key_value(const nlohmann::json& kv) {
    const nlohmann::json none;
    return {unb64(kv.value("key", none)), unb64(kv.value("value", none)), as_int(kv.value("lease", none)),
            as_int(kv.value("mod_revision", none))};
}

// The first key after every key that starts with `prefix` (etcd's range_end).
std::string prefix_end(std::string prefix) {
    while (!prefix.empty()) {
        auto& last = prefix.back();
        if (static_cast<unsigned char>(last) < 0xff) {
            ++last;
            return prefix;
        }
        prefix.pop_back();
    }
    return std::string(1, '\0');
}

}  // namespace

std::vector<std::string> etcd_client::parse_endpoints(const std::string& comma_separated) {
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at <= comma_separated.size()) {
        const auto comma = comma_separated.find(',', at);
        auto one = comma_separated.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (!one.empty()) out.push_back(std::move(one));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

std::vector<etcd_client::endpoint> etcd_client::split_endpoints(const std::vector<std::string>& endpoints, bool tls) {
    const std::string scheme = tls ? "https://" : "http://";
    std::vector<endpoint> out;
    for (const auto& e : endpoints) {
        if (e.rfind(scheme, 0) != 0)
            throw std::invalid_argument("an etcd endpoint is " + scheme + "host:port" +
                                        (tls ? " (TLS is configured)" : " (no TLS is configured)") + ", not '" +
                                        e.substr(0, 100) + "'");
        auto rest = e.substr(scheme.size());
        if (!rest.empty() && rest.back() == '/') rest.pop_back();
        const auto colon = rest.rfind(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size() ||
            rest.find_first_not_of("0123456789", colon + 1) != std::string::npos || rest.find('/') != std::string::npos)
            throw std::invalid_argument("an etcd endpoint is " + scheme + "host:port, not '" + e.substr(0, 100) + "'");
        auto host = rest.substr(0, colon);
        if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
        out.push_back({host, rest.substr(colon + 1)});
    }
    if (out.empty()) throw std::invalid_argument("no etcd endpoint given");
    return out;
}

etcd_client::etcd_client(std::vector<std::string> endpoints, std::shared_ptr<const boost::asio::ssl::context> tls,
                         std::chrono::milliseconds timeout)
    : endpoints_(split_endpoints(endpoints, tls != nullptr)), tls_(std::move(tls)), timeout_(timeout) {}

nlohmann::json etcd_client::call(const std::string& path, const nlohmann::json& body) {
    std::string last_error;
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
        const auto at = (preferred_ + i) % endpoints_.size();
        const auto& ep = endpoints_[at];
        util::http_reply res;
        try {
            res = util::http_call("POST", ep.host, ep.port, path, {{"Content-Type", "application/json"}}, body.dump(),
                                  timeout_, tls_.get());
        } catch (const util::http_failure& e) {
            last_error = e.what();
            continue;
        }
        auto reply = nlohmann::json::parse(res.body, nullptr, false);
        if (res.status != 200 || reply.is_discarded() || !reply.is_object()) {
            // An error from a member that is up (no leader yet, a lost
            // lease): another member will not say otherwise for long.
            last_error = ep.host + ":" + ep.port + ": HTTP " + std::to_string(res.status) + " " + res.body.substr(0, 200);
            continue;
        }
        preferred_ = at;
        return reply;
    }
    throw etcd_error("etcd did not answer " + path + " (" + last_error + ")");
}

std::int64_t etcd_client::grant(std::chrono::seconds ttl) {
    const auto reply = call("/v3/lease/grant", {{"TTL", ttl.count()}});
    const auto id = as_int(reply.value("ID", nlohmann::json()));
    if (id == 0) throw etcd_error("etcd granted no lease: " + reply.dump().substr(0, 200));
    return id;
}

std::int64_t etcd_client::keepalive(std::int64_t lease) {
    const auto reply = call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}});
    // A streaming call through the gateway: its one answer is under "result".
    const auto& result = reply.contains("result") ? reply.at("result") : reply;
    return as_int(result.value("TTL", nlohmann::json()));
}

void etcd_client::revoke(std::int64_t lease) { call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}); }

void etcd_client::put(const std::string& key, const std::string& value, std::int64_t lease) {
    nlohmann::json body = {{"key", b64(key)}, {"value", b64(value)}};
    if (lease != 0) body["lease"] = std::to_string(lease);
    call("/v3/kv/put", body);
}

std::vector<etcd_client::key_value> etcd_client::range_prefix(const std::string& prefix) {
    const auto reply = call("/v3/kv/range", {{"key", b64(prefix)}, {"range_end", b64(prefix_end(prefix))}});
    std::vector<key_value> out;
    if (const auto kvs = reply.find("kvs"); kvs != reply.end() && kvs->is_array())
        for (const auto& kv : *kvs) out.push_back(to_key_value(kv));
    return out;
}

std::optional<etcd_client::key_value> etcd_client::get(const std::string& key) {
    const auto reply = call("/v3/kv/range", {{"key", b64(key)}});
    if (const auto kvs = reply.find("kvs"); kvs != reply.end() && kvs->is_array() && !kvs->empty())
        return to_key_value(kvs->front());
    return std::nullopt;
}

void etcd_client::erase(const std::string& key) { call("/v3/kv/deleterange", {{"key", b64(key)}}); }

std::size_t etcd_client::count_prefix(const std::string& prefix) {
    const auto reply =
        call("/v3/kv/range", {{"key", b64(prefix)}, {"range_end", b64(prefix_end(prefix))}, {"count_only", true}});
    return static_cast<std::size_t>(std::max<std::int64_t>(0, as_int(reply.value("count", nlohmann::json()))));
}

bool etcd_client::put_if_unchanged(const std::string& key, std::int64_t mod_revision, const std::vector<put_op>& puts) {
    nlohmann::json compare = mod_revision == 0
                                 ? nlohmann::json{{"key", b64(key)}, {"target", "CREATE"}, {"result", "EQUAL"},
                                                  {"create_revision", "0"}}
                                 : nlohmann::json{{"key", b64(key)}, {"target", "MOD"}, {"result", "EQUAL"},
                                                  {"mod_revision", std::to_string(mod_revision)}};
    auto success = nlohmann::json::array();
    for (const auto& p : puts) {
        nlohmann::json put = {{"key", b64(p.key)}, {"value", b64(p.value)}};
        if (p.lease != 0) put["lease"] = std::to_string(p.lease);
        success.push_back({{"request_put", put}});
    }
    const auto reply = call("/v3/kv/txn", {{"compare", nlohmann::json::array({compare})}, {"success", success}});
    return reply.value("succeeded", false);
}

}  // namespace cellgate::cluster
