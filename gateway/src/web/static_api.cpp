// The chat page at "/" and its assets under "/static/": compiled into the
// binary (or read from --static-dir while developing the page).
#include "web/web_api.hpp"
#include "contents/contents_store.hpp"
#include "http/static_assets.hpp"
#include "util/api_error.hpp"

#include <filesystem>
#include <fstream>

namespace cellgate::web {

using namespace http;

namespace {

std::string page_policy(bool output_scripts) {
    // Kernel output never enters the page's own DOM as HTML: rich HTML goes
    // into sandboxed iframes with an opaque origin. 'unsafe-inline' is added
    // only when the operator lets those frames run scripts (they inherit it).
    return std::string("default-src 'none'; script-src 'self'") + (output_scripts ? " 'unsafe-inline'" : "") +
           "; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; "
           "frame-src 'self' blob: data:; font-src 'self'; form-action 'none'; base-uri 'none'; "
           "frame-ancestors 'none'";
}

std::optional<std::string> asset_bytes(const web_options& web, const std::string& name) {
    if (!web.static_dir.empty()) {
        // Development: files from disk, names already checked.
        for (const auto& [prefix, dir] : {std::pair{"web/", web.static_dir / "web"}, std::pair{"js/", web.static_dir / "js"}}) {
            if (name.rfind(prefix, 0) != 0) continue;
            std::ifstream in(dir / name.substr(std::string(prefix).size()), std::ios::binary);
            if (!in) return std::nullopt;
            return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        }
        return std::nullopt;
    }
    for (const auto& a : assets::all())
        if (a.name == name) return std::string(a.data, a.size);
    return std::nullopt;
}

response asset_response(const web_options& web, const std::string& name) {
    auto bytes = asset_bytes(web, name);
    if (!bytes) throw api_exception(404, "Not found");
    response r;
    r.body = std::move(*bytes);
    auto mime = std::string(contents::mime_type_for(name));
    if (mime.rfind("text/", 0) == 0 && mime.find("charset") == std::string::npos) mime += "; charset=utf-8";
    r.content_type = mime;
    r.headers.emplace_back("Content-Security-Policy", page_policy(web.output_scripts));
    r.headers.emplace_back("X-Frame-Options", "DENY");
    r.headers.emplace_back("Referrer-Policy", "no-referrer");
    return r;
}

bool safe_asset_name(const std::string& path) {
    if (path.empty() || path.size() > 200 || path.find("..") != std::string::npos || path.front() == '/') return false;
    for (const char c : path)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '-' || c == '_' || c == '.')) return false;
    return true;
}

}  // namespace

// The handlers keep their own copy of `web` (a caller may pass a temporary).
void register_static_api(router& r, const web_options& web) {
    r.add(bhttp::verb::get, "/", [web](const request_ptr&, reply_fn reply) { reply(asset_response(web, "web/index.html")); });
    r.add(bhttp::verb::get, "/static/{path*}", [web](const request_ptr& req, reply_fn reply) {
        const auto& path = req->param("path");
        if (!safe_asset_name(path)) throw api_exception(404, "Not found");
        // The page's own files, then the JavaScript client it imports.
        if (asset_bytes(web, "web/" + path)) return reply(asset_response(web, "web/" + path));
        reply(asset_response(web, "js/" + path));
    });
    r.add(bhttp::verb::get, "/static-config.json", [web](const request_ptr&, reply_fn reply) {
        reply(json_response(200, {{"output_scripts", web.output_scripts}}));
    });
}

}  // namespace cellgate::web
