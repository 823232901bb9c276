#pragma once

#include "kernels/policy.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace cellgate::kernels {

// A named, immutable copy of a session's workspace, taken while it runs
// (kernel_manager::snapshot): sessions start from it with their own copy
// (kernel_manager::start_from_snapshot). It outlives the session it was
// taken from; its owner deletes it. Kept on disk by the launcher
// (<state dir>/snapshots/<id>/) and listed in the state store.
struct snapshot_record {
    std::string id, name, tenant;
    std::string source;     // the session it was taken from
    std::string spec_name;  // what its children run, as the source did
    std::map<std::string, std::string> env;
    kernel_policy policy;
    std::chrono::system_clock::time_point created{};
    std::uint64_t bytes = 0;       // the workspace's size (its cap)
    std::uint64_t disk_bytes = 0;  // what the copy holds on the host's disk (0: shared blocks, a reflink)
    bool reflinked = false;
    // What a child gets: "files" (the workspace; a new kernel). The kernel's
    // memory is not carried (see docs/agent-api.md "Snapshots and fork").
    std::string mode = "files";
};

nlohmann::json to_json(const snapshot_record& s);  // the stored form (the API's model is built from it)
snapshot_record snapshot_from_json(const nlohmann::json& j, const kernel_policy& fallback);

}  // namespace cellgate::kernels
