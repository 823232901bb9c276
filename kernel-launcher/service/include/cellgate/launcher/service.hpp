#pragma once

// The privileged launcher service (cellgate-launchd) and its client.
//
// The internet-facing gateway runs unprivileged and asks the service, over a
// unix socket, for the few things that need root: start a sandbox, signal
// it, read its state, list, remove, reap. One request per connection, one
// JSON object per line each way. The schema is closed: an unknown operation,
// an unknown field or a wrong type is refused before anything happens, and
// every spec goes through the launcher's own strict parsing and validation.
//
// One operation keeps its connection: `exec`. Its reply line carries the
// process's descriptors (SCM_RIGHTS, in the order the reply's "fds" names
// them), and the connection becomes the process's handle: the client may
// write {"signal":"SIGTERM"} lines (exec signals only, ≤ 128 bytes each), and
// the service writes one {"exit":{"code":…,"signal":…}} line when the process
// has ended, then closes. A client that closes first, or writes anything
// else, has the process killed.

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/sandbox_launcher.hpp"
#include "cellgate/launcher/sandbox_info.hpp"
#include "cellgate/launcher/sandbox_spec.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace cellgate::launcher::service {

constexpr std::size_t max_request_bytes = 1u << 20;
constexpr std::size_t max_reply_bytes = 64u << 20;

enum class op {
    create, validate, signal, status, list, remove, set_cpu_shares, usage, reap, exec, checkpoint, restore,
    snapshot, remove_snapshot, create_volume, volume_usage, remove_volume, build_step, remove_layer,
    import_image
};

struct request {
    service::op op = op::list;
    sandbox_spec spec;                 // create, validate
    std::string id;                    // signal, status, remove, set_cpu_shares, exec, checkpoint, restore, snapshot
    std::string snapshot;              // snapshot, remove_snapshot
    std::string volume;                // create_volume, volume_usage, remove_volume
    std::uint64_t bytes = 0;           // create_volume
    build_step_spec step;              // build_step
    std::string layer;                 // remove_layer
    image_import_spec import;          // import_image
    exec_spec process;                 // exec ("process": argv, cwd, env, tty, rows, cols, stdin)
    int signal = 0;                    // SIGINT, SIGTERM or SIGKILL
    bool keep_workspace = false;       // remove
    bool reset_peak = false;           // usage
    std::uint32_t shares = 0;          // set_cpu_shares
    std::set<std::string> keep;        // reap
    bool unused_workspaces = false;    // reap
};

// The request was malformed; nothing was done.
class bad_request : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Parses one request line strictly; throws bad_request (or spec_error for a
// spec the launcher's parser refuses).
request parse_request(std::string_view line);
nlohmann::json to_json(const request& r);

// Replies: {"ok": true, "result": …} or {"ok": false, "error": {kind, step, message}}.
nlohmann::json status_to_json(const sandbox_status& s);  // key included (the socket is the gateway's only)
sandbox_status status_from_json(const nlohmann::json& j);
nlohmann::json usage_to_json(const sandbox_usage& u);
sandbox_usage usage_from_json(const nlohmann::json& j);

// The gateway's side: the same calls as launcher::launcher, over the socket.
// Errors come back as the launcher's own exception types.
class client final : public sandbox_launcher {
public:
    explicit client(std::filesystem::path socket);

    sandbox_info launch(const sandbox_spec& spec) override;
    void signal(const std::string& id, int signal) override;
    sandbox_status status(const std::string& id) override;
    void set_cpu_shares(const std::string& id, std::uint32_t shares) override;
    sandbox_usage usage(const std::string& id, bool reset_peak) override;
    std::vector<sandbox_status> list() override;
    void remove(const std::string& id, remove_options options = {}) override;
    std::vector<std::string> reap_orphans(const std::set<std::string>& keep = {},
                                          bool unused_workspaces = false) override;
    void validate(const sandbox_spec& spec) const override;
    // The descriptors arrive over the socket, so an unprivileged client reads
    // and writes them itself; the connection stays open as the handle.
    exec_process exec(const std::string& id, const exec_spec& spec) override;
    checkpoint_info checkpoint(const std::string& id) override;
    sandbox_info restore(const std::string& id) override;
    snapshot_info snapshot_workspace(const std::string& id, const std::string& snapshot) override;
    void remove_snapshot(const std::string& snapshot) override;
    void create_volume(const std::string& volume, std::uint64_t bytes) override;
    volume_info volume_usage(const std::string& volume) override;
    void remove_volume(const std::string& volume) override;
    build_step_result run_build_step(const build_step_spec& spec) override;
    void remove_layer(const std::string& id) override;
    image_import_result import_image(const image_import_spec& spec) override;

private:
    nlohmann::json call(const request& r) const;
    unique_fd connect() const;
    std::filesystem::path socket_;
};

}  // namespace cellgate::launcher::service
