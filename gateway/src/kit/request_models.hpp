#pragma once

// What the REST handlers read from request bodies, as pure functions: each
// checks types and values in the order the handler needs them and throws
// api_exception with the message the client sees (a nlohmann type error
// becomes a 400 in the server). None touches a kernel, a session or a file,
// so unit tests and the HTTP fuzz target call exactly the code the server runs.

#include "util/multipart.hpp"

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cellgate::kernels {
struct kernel_policy;
struct policy_overrides;
}  // namespace cellgate::kernels
namespace cellgate::core {
struct session_request;
struct cell_request;
}  // namespace cellgate::core
namespace cellgate::agent {
struct agent_limits;
struct execution_options;
}  // namespace cellgate::agent

namespace cellgate::kit {

// A request's optional snapshot "name" (1–128 characters, no control
// characters; "" when absent), or api_exception(400). /v1 and E2B.
std::string snapshot_name(const nlohmann::json& body);
inline constexpr std::size_t max_fork_children = 16;  // children per fork, /v1 and E2B
// A fork's optional "count": 1 when absent or null, else a whole number from
// 1 to max_fork_children, or api_exception(400). /v1 and E2B.
std::size_t fork_count(const nlohmann::json& body);
// The body of POST /v1/sessions/{id}/snapshots ({"name"?}; an empty body is
// {}): the snapshot's name.
std::string snapshot_request_from(const nlohmann::json& body);
// The body of POST /v1/sessions/{id}/fork ({"count"?, "name"?}).
struct fork_request {
    std::size_t count = 1;
    std::string name;
};
fork_request fork_request_from(const nlohmann::json& body);

// An optional string member: absent or null gives `fallback`.
std::string string_field(const nlohmann::json& body, const char* key, const std::string& fallback = "");
// 400 "Unknown member 'x' in <what>" for a member of `body` not in `allowed`.
void only_members(const nlohmann::json& body, std::initializer_list<const char*> allowed, const char* what);
// An object of strings under `key` ({} when absent or null); api_exception(400)
// naming `where` (the key's full name in the request) otherwise.
std::map<std::string, std::string> string_object(const nlohmann::json& body, const char* key, const std::string& where);

// Environment for a new kernel from a request's "env": KERNEL_* names only,
// other names are dropped (Jupyter gateway clients send some).
std::map<std::string, std::string> kernel_env_from(const nlohmann::json& body);
// The agent API's form: a name other than KERNEL_* is a 400.
std::map<std::string, std::string> strict_env(const nlohmann::json& body);

// POST /api/kernels {name, env}: the kernelspec name, "" for the default.
std::string kernel_name_from(const nlohmann::json& body);

// POST /api/sessions {path, name, type, kernel}; "notebook" is the old name of path.
struct session_fields {
    std::string path, name, type;
};
session_fields session_fields_from(const nlohmann::json& body);
// One of a session's text fields (path, name, type), at most this long (400 beyond).
inline constexpr std::size_t max_session_field_bytes = 4096;
std::string session_field(const nlohmann::json& body, const char* key, const std::string& fallback = {});
// The "kernel" member of a session request ({id} or {name, env}); {} when absent.
nlohmann::json kernel_member(const nlohmann::json& body);

// PUT /api/contents for a file or notebook model: the bytes to write (nullopt
// when the model has no content) and JupyterLab's chunk number, if any.
struct contents_payload {
    std::optional<std::string> data;
    std::optional<long long> chunk;  // 1 starts the file, 2… append, -1 is the last
};
contents_payload contents_payload_from(const nlohmann::json& body, const std::string& type);
// POST /api/contents: a copy, or a new untitled entry of a type.
struct new_entry_request {
    std::optional<std::string> copy_from;
    std::string type;  // "file", "notebook" or "directory"
    std::string ext;   // "" or starting with '.'
};
new_entry_request new_entry_from(const nlohmann::json& body);
// PATCH /api/contents {path}: the new path.
std::string rename_target_from(const nlohmann::json& body);

// POST /v1/sessions {kernel, env, timeout_s, idle_timeout_s, lifetime_s,
// output_limit_bytes, lifecycle, network, volumes, from_snapshot}: the
// session `tenant` asks the core for (core::sessions::start holds each limit
// to its ceiling and resolves the snapshot, network and volumes).
core::session_request session_request_from(const nlohmann::json& body, const std::string& tenant);
// A volume's name: 1 to 64 letters, digits, '-' and '_'.
bool is_volume_name(const std::string& n);
// The kernelspec name ("" for the default).
std::string agent_kernel_name(const nlohmann::json& body);
// The limits a body asks for (timeout_s, idle_timeout_s, lifetime_s,
// output_limit_bytes, lifecycle): positive, fractions rounded up, so a
// request never asks for 0, which means none.
kernels::policy_overrides limits_asked_from(const nlohmann::json& body);
// A positive number of seconds at `key` (rounded up), or none; 400 for anything else.
std::optional<std::chrono::seconds> asked_seconds(const nlohmann::json& body, const char* key);
// A cell from POST /v1/sessions/{id}/execute, /v1/execute or an MCP tool call
// ({code, timeout_s, max_output_tokens | max_output_bytes, max_image_pixels}):
// types and signs checked here, ceilings by the core (core::cell_options).
core::cell_request cell_request_from(const nlohmann::json& body);
// POST /v1/execute "files": [{path, content_base64}] as checked workspace
// paths and their bytes.
std::vector<std::pair<std::string, std::string>> inline_files_from(const nlohmann::json& body);

// POST /v1/sessions/{id}/files (multipart): the "path" field, and the
// workspace path a file part is saved to (its base name only, never a path
// from the client's disk).
std::string form_directory(const std::vector<form_part>& parts);
std::string form_file_path(const form_part& part, const std::string& directory);

}  // namespace cellgate::kit
