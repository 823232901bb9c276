#include "core/network.hpp"

#include "util/api_error.hpp"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <set>

namespace cellgate::core {

using nlohmann::json;

namespace {

constexpr std::size_t max_entries = 256;

std::vector<std::string> entries(const json& network, const char* key) {
    std::vector<std::string> out;
    const auto it = network.find(key);
    if (it == network.end() || it->is_null()) return out;
    if (!it->is_array()) throw api_exception(400, std::string("network.") + key + " must be an array of strings");
    if (it->size() > max_entries)
        throw api_exception(400, std::string("network.") + key + " has more than 256 entries");
    for (const auto& e : *it) {
        if (!e.is_string()) throw api_exception(400, std::string("network.") + key + " must be an array of strings");
        out.push_back(e.get<std::string>());
    }
    return out;
}

egress::policy parse_or_400(const std::vector<std::string>& allow, const std::vector<std::string>& deny) {
    try {
        return egress::policy::parse(allow, deny);
    } catch (const std::invalid_argument& e) {
        throw api_exception(400, std::string("network: ") + e.what());
    }
}

// The allow list with its presets' entries added.
std::vector<std::string> expanded_allow(const json& n, const network_settings& s) {
    auto allow = n.value("allow", std::vector<std::string>{});
    for (const auto& p : n.value("presets", std::vector<std::string>{})) {
        const auto it = s.presets.find(p);
        if (it != s.presets.end()) allow.insert(allow.end(), it->second.begin(), it->second.end());
    }
    return allow;
}

egress::connection_record record_from(const json& j) {
    egress::connection_record r;
    r.seq = j.value("seq", std::uint64_t{0});
    r.time_ms = j.value("time_ms", std::int64_t{0});
    r.duration_ms = j.value("duration_ms", std::int64_t{0});
    r.method = j.value("method", "");
    r.host = j.value("host", "");
    r.port = j.value("port", std::uint16_t{0});
    r.address = j.value("address", "");
    r.bytes_up = j.value("bytes_up", std::uint64_t{0});
    r.bytes_down = j.value("bytes_down", std::uint64_t{0});
    r.allowed = j.value("verdict", "") == "allowed";
    r.rule = j.value("rule", "");
    r.reason = j.value("reason", "");
    r.injected = j.value("credential_injected", false);
    r.tls_terminated = j.value("tls_terminated", false);
    return r;
}

}  // namespace

json normalize_network(const json& network, const network_settings& settings) {
    if (!network.is_object()) throw api_exception(400, "'network' must be an object {allow, deny, preset}");
    for (const auto& [key, value] : network.items())
        if (key != "allow" && key != "deny" && key != "preset" && key != "presets")
            throw api_exception(400, "network: unknown field '" + key + "' (allow, deny, preset)");
    if (!settings.proxy) throw api_exception(400, "this gateway runs no egress proxy: sessions cannot have a network");
    json out = {{"allow", entries(network, "allow")}, {"deny", entries(network, "deny")}, {"presets", json::array()}};
    std::set<std::string> presets;
    for (const char* key : {"preset", "presets"}) {
        const auto it = network.find(key);
        if (it == network.end() || it->is_null()) continue;
        const auto add = [&](const json& p) {
            if (!p.is_string()) throw api_exception(400, "network.preset must be a name or an array of names");
            const auto name = p.get<std::string>();
            if (!settings.presets.count(name)) {
                std::string known;
                for (const auto& [n, _] : settings.presets) known += (known.empty() ? "" : ", ") + n;
                throw api_exception(400, "network: no preset '" + name + "'" +
                                             (known.empty() ? std::string(" (none configured)") : " (known: " + known + ")"));
            }
            presets.insert(name);
        };
        if (it->is_array()) {
            for (const auto& p : *it) add(p);
        } else {
            add(*it);
        }
    }
    out["presets"] = std::vector<std::string>(presets.begin(), presets.end());
    parse_or_400(expanded_allow(out, settings), out["deny"].get<std::vector<std::string>>());
    return out;
}

egress::session_rules rules_for(const json& network, const kernels::kernel& k, const network_settings& settings) {
    egress::session_rules r;
    r.tenant = k.tenant();
    r.layers.push_back(parse_or_400(expanded_allow(network, settings), network.value("deny", std::vector<std::string>{})));
    if (const auto it = settings.by_kernelspec.find(k.spec_name()); it != settings.by_kernelspec.end())
        r.layers.push_back(it->second);
    if (const auto it = settings.tenant_max.find(k.tenant()); it != settings.tenant_max.end())
        r.layers.push_back(it->second);
    // The operator's secrets reach only the tenants each names (or all, when it says so).
    for (const auto& h : settings.headers)
        if (h.for_tenant(k.tenant())) r.headers.push_back(h);
    if (const auto it = settings.tenant_headers.find(k.tenant()); it != settings.tenant_headers.end())
        r.headers.insert(r.headers.end(), it->second.begin(), it->second.end());
    return r;
}

json current_network(const kernels::kernel& k, const network_settings& settings) {
    if (!k.policy().network) return nullptr;
    if (settings.store)
        if (auto rec = settings.store->record("network", k.id())) return std::move(rec->body);
    return *k.policy().network;
}

namespace {

// A file the sandbox reads (0644, whole or not at all).
void write_public_file(const std::filesystem::path& p, const std::string& text) {
    const auto tmp = p.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
    }
    std::filesystem::permissions(tmp, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                          std::filesystem::perms::group_read | std::filesystem::perms::others_read);
    std::filesystem::rename(tmp, p);
}

}  // namespace

void attach_egress(const kernels::kernel& k, const std::filesystem::path& dir, network_settings& settings) {
    if (!settings.proxy) throw std::runtime_error("no egress proxy");
    // Beside the socket: the CA the image trusts (the kernel's entry point
    // adds it to its bundle) and pip's index, written at every (re)start.
    if (!settings.ca_pem.empty()) write_public_file(dir / "ca.pem", settings.ca_pem);
    if (!settings.pip_index_url.empty())
        write_public_file(dir / "pip.conf", "[global]\nindex-url = " + settings.pip_index_url + "\n");
    if (settings.proxy->attached(k.id())) return;  // a restart of its sandbox: the socket is still there
    std::vector<egress::connection_record> earlier;
    if (settings.store)  // this kernel's records only (review turn 3, M5)
        for (const auto& rec : settings.store->records_of("egress", k.id())) earlier.push_back(record_from(rec.body));
    settings.proxy->attach(k.id(), dir / "proxy.sock", rules_for(current_network(k, settings), k, settings));
    if (!earlier.empty()) settings.proxy->restore_log(k.id(), std::move(earlier));
}

void detach_egress(const std::string& kernel_id, const std::filesystem::path& egress_root, network_settings& settings) {
    if (!settings.proxy || !settings.proxy->attached(kernel_id)) return;
    settings.proxy->detach(kernel_id);
    std::error_code ec;
    std::filesystem::remove_all(egress_root / kernel_id, ec);
}

json egress_summary(const std::string& kernel_id, std::int64_t from_ms, std::int64_t to_ms,
                    const network_settings& settings) {
    if (!settings.proxy || !settings.proxy->attached(kernel_id)) return nullptr;
    std::uint64_t allowed = 0, refused = 0, up = 0, down = 0;
    json hosts = json::array();
    std::set<std::string> seen;
    for (const auto& r : settings.proxy->log(kernel_id, 0, 1000)) {
        if (r.time_ms < from_ms || r.time_ms > to_ms) continue;
        ++(r.allowed ? allowed : refused);
        up += r.bytes_up;
        down += r.bytes_down;
        const auto key = r.host + ":" + std::to_string(r.port) + (r.allowed ? " allowed" : " refused");
        if (seen.insert(key).second && hosts.size() < 20)
            hosts.push_back({{"host", r.host}, {"port", r.port}, {"verdict", r.allowed ? "allowed" : "refused"}});
    }
    return {{"connections", allowed + refused}, {"refused", refused}, {"bytes_up", up}, {"bytes_down", down},
            {"targets", hosts}};
}

void keep_egress_log(network_settings& settings) {
    if (!settings.proxy || !settings.store || settings.log_writer) return;
    constexpr std::size_t keep = 1000;  // as many as the proxy keeps in memory
    // Queued here, written in batches by the writer's thread (review turn 3, M5).
    settings.log_writer = std::make_shared<egress_log_writer>(*settings.store, keep, settings.log_queue);
    settings.proxy->on_record([w = std::weak_ptr(settings.log_writer)](const std::string& session,
                                                                      const egress::connection_record& rec) {
        if (const auto writer = w.lock()) writer->add(session, rec);
    });
}

}  // namespace cellgate::core
