#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace cellgate::launcher {

// A launch or teardown step failed. `step` names it ("prepare-workspace",
// "runtime-run", "kernel-info", …); `error_number` is errno where one applies.
class launch_error : public std::runtime_error {
public:
    launch_error(std::string step, const std::string& what, int error_number = 0);
    const std::string& step() const noexcept { return step_; }
    int error_number() const noexcept { return errno_; }

private:
    std::string step_;
    int errno_;
};

// The request itself was wrong (bad spec, unknown image, …); nothing was started.
class spec_error : public launch_error {
public:
    explicit spec_error(const std::string& what) : launch_error("validate", what) {}
};

// How a sandbox whose template's ready check never passed ends its log
// (sandbox_spec::ready_cmd): what follows it in a launch_error is the
// sandbox's own output (the check and the start command's log tail), which
// the gateway may show the session's owner.
inline constexpr std::string_view ready_check_failed = "cellgate: the template's ready check did not pass";

}  // namespace cellgate::launcher
