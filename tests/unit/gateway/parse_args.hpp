#pragma once

// The gateway's command line, as the config tests give it.

#include "config/gateway_config.hpp"

#include <string>
#include <vector>

namespace cellgate::fixtures {

// parse_config over `args` (argv[0] added), without CELLGATE_TOKEN.
inline config::gateway_config parse(std::vector<std::string> args) {
    args.insert(args.begin(), "cellgate");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return config::parse_config(static_cast<int>(argv.size()), argv.data(), nullptr);
}

}  // namespace cellgate::fixtures
