#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace cellgate::kernels {

// A tenant's named volume: an ext4 image of `bytes` kept by the launcher
// (<state dir>/volumes/<id>.img), mounted into the sessions that name it at
// start, and kept until its owner deletes it (kernel_manager_volumes.cpp).
struct volume_record {
    std::string id, name, tenant;
    std::uint64_t bytes = 0;
    std::chrono::system_clock::time_point created{};
    bool ready = false;  // false while it is being made
};

nlohmann::json to_json(const volume_record& v);  // the stored form
volume_record volume_from_json(const nlohmann::json& j);

}  // namespace cellgate::kernels
