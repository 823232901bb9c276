#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace cellgate::assets {

// The chat page and the JavaScript client, compiled into the binary so the
// gateway serves them with no CDN and no files beside it.
struct asset {
    std::string_view name;  // "web/index.html", "js/cellgate.js", …
    const char* data;
    std::size_t size;
};

const std::vector<asset>& all();

}  // namespace cellgate::assets
