#include "core/runtimes.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <stdexcept>

namespace cellgate::core {
namespace {

// A version's numeric parts ("3.11.2" → 3, 11, 2); a part that is not a
// number ends the list ("1.3.31+ds1" → 1, 3, 31).
std::vector<long> parts_of(std::string_view v) {
    std::vector<long> out;
    while (!v.empty()) {
        long n = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc()) break;
        out.push_back(n);
        v.remove_prefix(static_cast<std::size_t>(end - v.data()));
        if (v.empty() || v.front() != '.') break;
        v.remove_prefix(1);
    }
    return out;
}

int compare(const std::vector<long>& a, const std::vector<long>& b) {
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        const long x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

}  // namespace

bool version_matches(std::string_view version, std::string_view selector) {
    while (!selector.empty() && selector.front() == ' ') selector.remove_prefix(1);
    while (!selector.empty() && selector.back() == ' ') selector.remove_suffix(1);
    if (selector.empty() || selector == "*" || selector == "x" || selector == "latest") return true;
    const auto have = parts_of(version);
    for (const std::string_view op : {">=", "<=", ">", "<", "^", "~", "="}) {
        if (!selector.starts_with(op)) continue;
        const auto want = parts_of(selector.substr(op.size()));
        if (want.empty()) return false;
        const int c = compare(have, want);
        if (op == ">=") return c >= 0;
        if (op == "<=") return c <= 0;
        if (op == ">") return c > 0;
        if (op == "<") return c < 0;
        if (op == "=") return c == 0;
        if (c < 0) return false;
        // ^: the same first non-zero part; ~: the same major and minor.
        const std::size_t fixed = op == "~" ? std::min<std::size_t>(2, want.size()) : 1;
        for (std::size_t i = 0; i < fixed && i < want.size(); ++i)
            if (i >= have.size() || have[i] != want[i]) return false;
        return true;
    }
    // A prefix: each given part equal, "x" or "*" matching any.
    std::size_t i = 0;
    while (!selector.empty()) {
        const auto dot = selector.find('.');
        const auto part = selector.substr(0, dot);
        if (part == "x" || part == "X" || part == "*") {
            // anything
        } else {
            long n = 0;
            const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), n);
            if (ec != std::errc() || end != part.data() + part.size()) return false;
            if (i >= have.size() || have[i] != n) return false;
        }
        ++i;
        if (dot == std::string_view::npos) break;
        selector.remove_prefix(dot + 1);
    }
    return true;
}

std::vector<runtime> runtimes_from_json(const nlohmann::json& j, const std::string& kernelspec) {
    if (!j.is_array()) throw std::runtime_error("runtimes must be an array");
    std::vector<runtime> out;
    for (const auto& e : j) {
        auto text = [&e](const char* key, bool required) {
            const auto it = e.find(key);
            if (it == e.end() || it->is_null()) {
                if (required) throw std::runtime_error(std::string("a runtime needs '") + key + "'");
                return std::string();
            }
            if (!it->is_string()) throw std::runtime_error(std::string("a runtime's '") + key + "' must be a string");
            return it->get<std::string>();
        };
        if (!e.is_object()) throw std::runtime_error("each runtime must be an object");
        runtime r;
        r.language = text("language", true);
        r.version = text("version", true);
        r.toolchain = text("runtime", false);
        r.compile = text("compile", false);
        r.run = text("run", true);
        if (const auto a = e.find("aliases"); a != e.end() && !a->is_null()) {
            if (!a->is_array()) throw std::runtime_error("a runtime's 'aliases' must be an array of strings");
            for (const auto& alias : *a) {
                if (!alias.is_string()) throw std::runtime_error("a runtime's 'aliases' must be an array of strings");
                r.aliases.push_back(alias.get<std::string>());
            }
        }
        if (r.language.empty() || r.version.empty() || r.run.empty())
            throw std::runtime_error("a runtime's language, version and run must not be empty");
        r.kernelspec = kernelspec;
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<runtime> builtin_runtimes(const std::filesystem::path& image_store, const std::string& kernelspec) {
    std::ifstream in(image_store / "languages" / "current" / "rootfs/opt/cellgate/runtimes.json");
    if (!in) return {};
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) throw std::runtime_error("the languages image's runtimes.json is not JSON");
    return runtimes_from_json(j, kernelspec);
}

void runtime_table::add(runtime r) {
    const std::lock_guard lock(mutex_);
    runtimes_.push_back(std::move(r));
}

void runtime_table::remove_kernelspec(const std::string& kernelspec) {
    const std::lock_guard lock(mutex_);
    std::erase_if(runtimes_, [&](const runtime& r) { return r.kernelspec == kernelspec; });
}

std::vector<runtime> runtime_table::list(const std::string& tenant) const {
    std::vector<runtime> out;
    {
        const std::lock_guard lock(mutex_);
        for (const auto& r : runtimes_)
            if (r.owner.empty() || r.owner == tenant) out.push_back(r);
    }
    std::stable_sort(out.begin(), out.end(), [](const runtime& a, const runtime& b) {
        if (a.language != b.language) return a.language < b.language;
        return compare(parts_of(a.version), parts_of(b.version)) > 0;
    });
    return out;
}

std::optional<runtime> runtime_table::find(const std::string& tenant, const std::string& language,
                                           const std::string& version) const {
    const auto want = lower(language);
    for (auto& r : list(tenant)) {
        bool named = lower(r.language) == want;
        for (const auto& a : r.aliases) named = named || lower(a) == want;
        if (named && version_matches(r.version, version)) return std::move(r);
    }
    return std::nullopt;
}

}  // namespace cellgate::core
