#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cellgate::launcher {

// Resource limits of one sandbox. Every field is a plain number with its unit
// in its name, so a request can cross a process boundary as JSON unchanged.
struct sandbox_limits {
    std::uint64_t memory_bytes = 2ull << 30;     // cgroup memory limit; swap is off
    std::uint32_t pids = 256;                    // cgroup pids limit
    std::uint32_t cpu_millis = 1000;             // CPU quota, 1000 = one core
    std::uint64_t workspace_bytes = 1ull << 30;  // size cap of /workspace
    std::uint64_t tmp_bytes = 256ull << 20;      // size cap of the /tmp tmpfs
    std::uint32_t nofile = 4096;                 // RLIMIT_NOFILE
    std::uint64_t fsize_bytes = 0;               // RLIMIT_FSIZE; 0 = the larger of workspace and tmp
    std::uint32_t cpu_shares = 1024;             // relative CPU weight (warm-pool kernels start low)
};

// A named volume (sandbox_launcher::create_volume) mounted into a sandbox at
// `path`, /volumes/<name>; read-write unless `read_only`. Whoever mounts it
// read-write owns its files from then on (they move to its uid range).
struct volume_mount {
    std::string volume;  // the volume's id
    std::string path;
    bool read_only = false;
    bool operator==(const volume_mount&) const = default;
};

void to_json(nlohmann::json& j, const volume_mount& v);
void from_json(const nlohmann::json& j, volume_mount& v);

// What the caller asks for. Plain and serialisable: this is the request that a
// later privileged launcher service receives over its unix socket.
struct sandbox_spec {
    std::string id;                  // empty: the launcher picks a UUID
    std::string image = "python";    // a name in the image store, or an absolute rootfs path
    std::string runtime = "runc";
    sandbox_limits limits;
    std::string workspace_dir;       // host path directly under the workspace root; empty: <root>/<id>
    std::map<std::string, std::string> env;  // names must pass the allow-list
    // The image's own environment (a template's ENV steps): any name but
    // the launcher's (CELLGATE_*), under the spec's env; at most 256 names,
    // 128 KiB in all.
    std::map<std::string, std::string> image_env;
    // A template's start command and ready check. The start command runs in
    // the background (as uid, in start_dir, a session of its own) before the
    // kernel; the ready check then runs every 200 ms until it exits 0, and
    // only then does the kernel start: the sandbox counts as started (and
    // warm) once the check has passed, and fails to start past its
    // start_timeout. Each at most 64 KiB, no NUL; start_dir absolute or empty
    // (/workspace). A spec with either does not fork from the zygote.
    std::string start_cmd, ready_cmd, start_dir;
    std::uint32_t uid = 1000;        // inside the sandbox; never 0
    std::uint32_t gid = 1000;
    std::vector<std::string> preload;  // Python modules imported before the first request
    // A host dir directly under launcher_config::egress_root holding the
    // gateway's egress proxy socket; mounted read-only at /run/egress. Empty:
    // the sandbox has no way out at all (loopback only).
    std::string egress_dir;
    // A snapshot (sandbox_launcher::snapshot_workspace) a new workspace
    // starts as a copy of; ignored when the workspace exists already.
    std::string from_snapshot;
    std::vector<volume_mount> volumes;  // at most 8
    std::chrono::milliseconds start_timeout{30000};
};

void to_json(nlohmann::json& j, const sandbox_limits& l);
void from_json(const nlohmann::json& j, sandbox_limits& l);
void to_json(nlohmann::json& j, const sandbox_spec& s);
void from_json(const nlohmann::json& j, sandbox_spec& s);

}  // namespace cellgate::launcher
