#include "http/http_types.hpp"

#include "util/api_error.hpp"

#include <cctype>

namespace cellgate::http {

response json_response(unsigned status, const nlohmann::json& body) {
    response r;
    r.status = status;
    r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return r;
}

response error_response(unsigned status, const std::string& message) {
    const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
    return json_response(status, {{"reason", std::string(reason)}, {"message", message}});
}

response empty_response(unsigned status) {
    response r;
    r.status = status;
    r.content_type.clear();
    return r;
}

nlohmann::json request_context::json_body(bool allow_empty) const {
    const auto& body = req.body();
    if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
        if (allow_empty) return nlohmann::json::object();
        throw api_exception(400, "A JSON body is required");
    }
    // nlohmann parses without recursion but copies and dumps recursively: a
    // body nested a million deep would overflow the stack of whatever
    // handler copies it.
    if (!json_nesting_within(body, max_body_json_depth))
        throw api_exception(400, "The request body is nested more than " + std::to_string(max_body_json_depth) +
                                     " levels deep");
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded()) throw api_exception(400, "The request body is not valid JSON");
    if (!j.is_object()) throw api_exception(400, "The request body must be a JSON object");
    return j;
}

namespace {
int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
}  // namespace

std::optional<std::string> url_decode(std::string_view in, bool plus_is_space) {
    std::string out;
    out.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        const char c = in[i];
        if (c == '%') {
            if (i + 2 >= in.size()) return std::nullopt;
            const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
            if (hi < 0 || lo < 0) return std::nullopt;
            const char decoded = static_cast<char>(hi * 16 + lo);
            if (decoded == '\0') return std::nullopt;
            out.push_back(decoded);
            i += 2;
        } else if (c == '+' && plus_is_space) {
            out.push_back(' ');
        } else if (c == '\0') {
            return std::nullopt;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

std::map<std::string, std::string> parse_query(std::string_view query) {
    std::map<std::string, std::string> out;
    while (!query.empty()) {
        const auto amp = query.find('&');
        const auto part = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        if (part.empty()) continue;
        const auto eq = part.find('=');
        auto key = url_decode(part.substr(0, eq), true);
        auto value = eq == std::string_view::npos ? std::optional<std::string>("") : url_decode(part.substr(eq + 1), true);
        if (!key || !value) continue;  // a malformed pair is ignored, like an unknown one
        out.emplace(std::move(*key), std::move(*value));
    }
    return out;
}

bool header_list_contains(std::string_view list, std::string_view item) {
    while (!list.empty()) {
        const auto comma = list.find(',');
        auto entry = list.substr(0, comma);
        while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
        while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
        if (entry == item) return true;
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
    return false;
}

std::string attachment_disposition(std::string_view filename) {
    std::string fallback;
    for (const char ch : filename) {
        const auto c = static_cast<unsigned char>(ch);
        fallback.push_back(c < 0x20 || c >= 0x7f || c == '"' || c == '\\' ? '_' : ch);
    }
    auto out = "attachment; filename=\"" + fallback + "\"";
    if (fallback != filename) out += "; filename*=UTF-8''" + url_encode_path(filename);
    return out;
}

bool safe_header_value(std::string_view value) noexcept {
    return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

std::size_t set_response_headers(bhttp::response_header<>& h, const response& r, const request* req,
                                 const std::vector<std::string>& allow_origins) {
    std::size_t dropped = 0;
    h.set(bhttp::field::server, "cellgate");
    if (!r.content_type.empty()) {
        if (safe_header_value(r.content_type)) h.set(bhttp::field::content_type, r.content_type);
        else ++dropped;
    }
    h.set(bhttp::field::cache_control, "no-store");
    h.set("X-Content-Type-Options", "nosniff");
    // A page served from /files/ (opened with ?token=) must not hand the URL,
    // token and all, to whatever it links to (review L6).
    h.set("Referrer-Policy", "no-referrer");
    for (const auto& [k, v] : r.headers) {
        if (safe_header_value(v)) h.set(k, v);
        else ++dropped;
    }
    // Origins named explicitly may call the REST API from a browser.
    if (req == nullptr) return dropped;
    const auto origin = (*req)[bhttp::field::origin];
    if (origin.empty() || !safe_header_value(origin)) return dropped;
    bool allowed = false;
    for (const auto& a : allow_origins) allowed = allowed || a == "*" || a == origin;
    if (!allowed) return dropped;
    h.set(bhttp::field::access_control_allow_origin, origin);
    h.set(bhttp::field::vary, "Origin");
    h.set(bhttp::field::access_control_allow_headers, "Authorization, Content-Type, X-XSRFToken, Accept");
    h.set(bhttp::field::access_control_allow_methods, "GET, POST, PUT, PATCH, DELETE, OPTIONS");
    h.set(bhttp::field::access_control_max_age, "600");
    return dropped;
}

std::string header_value(const request& req, std::string_view name) {
    const auto it = req.find(boost::beast::string_view(name.data(), name.size()));
    return it == req.end() ? std::string() : std::string(it->value());
}

std::string sse_event(const std::string& event, const nlohmann::json& data) {
    return "event: " + event + "\ndata: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

}  // namespace cellgate::http
