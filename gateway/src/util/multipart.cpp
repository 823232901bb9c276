#include "util/multipart.hpp"

#include <algorithm>
#include <cctype>

namespace cellgate {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// A parameter of a header value: name="value" or name=value (quotes with \\-escapes).
std::optional<std::string> header_param(std::string_view value, std::string_view name) {
    std::size_t pos = 0;
    while ((pos = value.find(';', pos)) != std::string_view::npos) {
        ++pos;
        auto rest = trim(value.substr(pos));
        const auto eq = rest.find('=');
        if (eq == std::string_view::npos) continue;
        if (lower(trim(rest.substr(0, eq))) != name) continue;
        auto v = trim(rest.substr(eq + 1));
        if (!v.empty() && v.front() == '"') {
            std::string out;
            for (std::size_t i = 1; i < v.size(); ++i) {
                if (v[i] == '\\' && i + 1 < v.size()) out.push_back(v[++i]);
                else if (v[i] == '"') return out;
                else out.push_back(v[i]);
            }
            return std::nullopt;  // unterminated quote
        }
        const auto end = v.find(';');
        return std::string(trim(v.substr(0, end)));
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> multipart_boundary(std::string_view content_type) {
    const auto semi = content_type.find(';');
    if (lower(trim(content_type.substr(0, semi))) != "multipart/form-data") return std::nullopt;
    auto b = header_param(content_type, "boundary");
    if (!b || b->empty() || b->size() > 200) return std::nullopt;
    return b;
}

std::optional<std::vector<form_part>> parse_multipart(std::string_view body, std::string_view boundary,
                                                      std::size_t max_parts) {
    const std::string delim = "--" + std::string(boundary);
    const std::string next_delim = "\r\n" + delim;
    std::vector<form_part> parts;
    auto pos = body.find(delim);
    if (pos == std::string_view::npos) return std::nullopt;
    pos += delim.size();
    for (;;) {
        if (body.substr(pos, 2) == "--") return parts;  // closing delimiter
        if (body.substr(pos, 2) != "\r\n") return std::nullopt;
        pos += 2;
        const auto headers_end = body.find("\r\n\r\n", pos);
        if (headers_end == std::string_view::npos) return std::nullopt;
        form_part part;
        bool disposition = false;
        for (auto h = body.substr(pos, headers_end - pos); !h.empty();) {
            const auto eol = h.find("\r\n");
            const auto line = h.substr(0, eol);
            h = eol == std::string_view::npos ? std::string_view{} : h.substr(eol + 2);
            const auto colon = line.find(':');
            if (colon == std::string_view::npos) return std::nullopt;
            const auto key = lower(trim(line.substr(0, colon)));
            const auto value = trim(line.substr(colon + 1));
            if (key == "content-disposition") {
                if (lower(value.substr(0, value.find(';'))) != "form-data") return std::nullopt;
                auto name = header_param(value, "name");
                if (!name) return std::nullopt;
                part.name = *name;
                part.filename = header_param(value, "filename");
                disposition = true;
            } else if (key == "content-type") {
                part.content_type = std::string(value);
            }
        }
        if (!disposition) return std::nullopt;
        const auto data_start = headers_end + 4;
        const auto end = body.find(next_delim, data_start);
        if (end == std::string_view::npos) return std::nullopt;
        part.data = body.substr(data_start, end - data_start);
        if (parts.size() >= max_parts) return std::nullopt;
        parts.push_back(std::move(part));
        pos = end + next_delim.size();
    }
}

}  // namespace cellgate
