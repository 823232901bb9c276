#pragma once

// A repeating timer for a stream's keepalives and progress ticks.

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>

namespace cellgate::util {

// Calls `tick` every `interval` until the returned function is called or
// dropped; `tick` runs on an io thread.
std::function<void()> every(boost::asio::io_context& io, std::chrono::milliseconds interval, std::function<void()> tick);

}  // namespace cellgate::util
