#include "http/router.hpp"

namespace cellgate::http {

namespace {

std::vector<std::string_view> split(std::string_view path) {
    std::vector<std::string_view> out;
    if (!path.empty() && path.front() == '/') path.remove_prefix(1);
    while (true) {
        const auto slash = path.find('/');
        out.push_back(path.substr(0, slash));
        if (slash == std::string_view::npos) break;
        path.remove_prefix(slash + 1);
    }
    return out;
}

}  // namespace

void router::add_upload(bhttp::verb method, std::string pattern, upload_handler handler) {
    // Beside a plain route of the same method and path (an upload that
    // takes only some content types): one route with both.
    for (auto& r : routes_)
        if (r.method == method && r.pattern == pattern && !r.upload) {
            r.upload = std::move(handler);
            return;
        }
    add(method, std::move(pattern), nullptr);
    routes_.back().upload = std::move(handler);
}

void router::add_guarded(bhttp::verb method, std::string pattern, route_guard guard, handler_fn handler) {
    add(method, std::move(pattern), std::move(handler));
    routes_.back().guard = std::move(guard);
}

void router::add_socket(std::string pattern, socket_handler handler, std::optional<route_guard> guard) {
    add(bhttp::verb::get, std::move(pattern), [](const request_ptr&, reply_fn reply) {
        reply(error_response(400, "This is a WebSocket endpoint: connect with an Upgrade: websocket request"));
    });
    routes_.back().socket = std::move(handler);
    routes_.back().guard = std::move(guard);
}

void router::add(bhttp::verb method, std::string pattern, handler_fn handler) {
    route r{method, pattern, {}, std::move(handler), std::nullopt, std::nullopt, std::nullopt};
    for (auto s : split(pattern)) r.segments.emplace_back(s);
    routes_.push_back(std::move(r));
}

router::match router::find(bhttp::verb method, std::string_view raw_path) const {
    match result;
    result.status = 404;
    auto raw_segments = split(raw_path);
    // "/api/kernels/" is "/api/kernels".
    if (raw_segments.size() > 1 && raw_segments.back().empty()) raw_segments.pop_back();
    std::vector<std::string> segments;
    for (auto s : raw_segments) {
        auto decoded = url_decode(s);
        if (!decoded) {
            result.status = 400;
            return result;
        }
        segments.push_back(std::move(*decoded));
    }
    for (const auto& r : routes_) {
        std::map<std::string, std::string> params;
        bool ok = true;
        std::size_t i = 0;
        for (; i < r.segments.size() && ok; ++i) {
            const auto& p = r.segments[i];
            if (p.size() > 3 && p.front() == '{' && p.ends_with("*}")) {
                // The rest of the path; an absent or empty rest is "".
                std::string rest;
                for (std::size_t j = i; j < segments.size(); ++j) rest += (j > i ? "/" : "") + segments[j];
                params[p.substr(1, p.size() - 3)] = rest;
                i = segments.size();
                break;
            }
            if (i >= segments.size()) {
                ok = false;
            } else if (p.size() > 2 && p.front() == '{' && p.back() == '}') {
                if (segments[i].empty()) ok = false;
                params[p.substr(1, p.size() - 2)] = segments[i];
            } else if (p != segments[i]) {
                ok = false;
            }
        }
        if (!ok) continue;
        const bool rest_pattern = !r.segments.empty() && r.segments.back().ends_with("*}");
        if (!rest_pattern && (i != r.segments.size() || segments.size() != r.segments.size())) continue;
        if (rest_pattern && segments.size() + 1 < r.segments.size()) continue;
        if (r.method != method) {
            result.status = 405;
            if (!result.allow.empty()) result.allow += ", ";
            result.allow += std::string(bhttp::to_string(r.method));
            continue;
        }
        result.handler = &r.handler;
        if (r.upload) result.upload = &*r.upload;
        if (r.guard) result.guard = &*r.guard;
        if (r.socket) result.socket = &*r.socket;
        result.params = std::move(params);
        result.pattern = r.pattern;
        result.status = 200;
        return result;
    }
    return result;
}

}  // namespace cellgate::http
