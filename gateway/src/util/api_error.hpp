#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace cellgate {

// An error the API reports to its caller: an HTTP status and a message that is
// safe to show (details go to the log, never to the wire).
struct api_error {
    unsigned status = 500;
    std::string message;
};

class api_exception : public std::runtime_error {
public:
    api_exception(unsigned status, const std::string& message)
        : std::runtime_error(message), status_(status) {}
    unsigned status() const noexcept { return status_; }

private:
    unsigned status_;
};

}  // namespace cellgate
