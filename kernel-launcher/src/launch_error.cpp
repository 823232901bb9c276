#include "cellgate/launcher/launch_error.hpp"

#include <cstring>

namespace cellgate::launcher {

namespace {
std::string describe(const std::string& step, const std::string& what, int error_number) {
    std::string s = step + ": " + what;
    if (error_number != 0) s += " (" + std::string(std::strerror(error_number)) + ")";
    return s;
}
}  // namespace

launch_error::launch_error(std::string step, const std::string& what, int error_number)
    : std::runtime_error(describe(step, what, error_number)), step_(std::move(step)),
      errno_(error_number) {}

}  // namespace cellgate::launcher
