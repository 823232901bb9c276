#pragma once

// The chat page (clients/web) and the JavaScript client it loads.

#include "http/router.hpp"

#include <filesystem>

namespace cellgate::web {

// The chat page: compiled-in assets, or files from static_dir when it is set.
struct web_options {
    std::filesystem::path static_dir;  // holds web/ and js/ (clients/ of a checkout)
    bool output_scripts = false;       // let HTML outputs run scripts in their sandboxed frames
};
void register_static_api(http::router& r, const web_options& web);  // /, /static/…

}  // namespace cellgate::web
