#include "http/http_types.hpp"

#include "util/api_error.hpp"

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

}  // namespace cellgate::http
