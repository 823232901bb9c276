#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate {

// One part of a multipart/form-data body (RFC 7578). Views point into the body.
struct form_part {
    std::string name;                     // the form field name
    std::optional<std::string> filename;  // present for file parts
    std::string content_type;
    std::string_view data;
};

// The boundary from a Content-Type header, or nullopt.
std::optional<std::string> multipart_boundary(std::string_view content_type);

// Splits a body into parts; nullopt when it is not well-formed (missing
// boundaries, no closing delimiter, headers without Content-Disposition, more
// than max_parts). Never throws.
std::optional<std::vector<form_part>> parse_multipart(std::string_view body, std::string_view boundary,
                                                      std::size_t max_parts = 256);

}  // namespace cellgate
