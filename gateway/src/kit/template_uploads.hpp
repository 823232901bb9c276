#pragma once

// The body of an upload of a template's files (E2B's PUT …/files/{hash},
// /v1's PUT /v1/templates/files/{key}): streamed to an unnamed file on the
// tenant's shelf (templates/template_files.hpp), at most the room its
// template storage has left, then kept under its key. Both doors use this.

#include "http/http_types.hpp"
#include "kit/services.hpp"
#include "templates/template_files.hpp"

#include <functional>
#include <string>

namespace cellgate::kit {

// `key_of` names the key from the request (throws api_exception(400) for a
// bad one); `done` replies once the archive is kept.
http::upload_handler template_files_upload(
    services& s, std::function<std::string(const http::request_ptr&)> key_of,
    std::function<void(const http::request_ptr&, const templates::file_archive&, const http::reply_fn&)> done);

}  // namespace cellgate::kit
