#pragma once

// Caps open client connections, in total and per remote address. A
// connection holds a slot from accept until its socket is gone (an HTTP
// session hands its slot to the WebSocket session it upgrades to).

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace cellgate::http {

class connection_limiter {
public:
    connection_limiter(std::size_t max_total, std::size_t max_per_address);

    // A slot, released when the last copy goes. Slots keep the counters alive,
    // so one released after the limiter is gone (at exit) is harmless.
    using slot = std::shared_ptr<const void>;
    // Null when the address or the total is at its cap. `per_address`
    // false: only the total counts (a trusted proxy's address).
    slot acquire(const std::string& address, bool per_address = true);
    // Both slots held as one (a connection's and its tenant's).
    static slot both(slot a, slot b);

    std::size_t open() const;
    std::size_t open_from(const std::string& address) const;

private:
    struct counters {
        std::size_t max_total = 0, max_per_address = 0;
        mutable std::mutex mutex;
        std::size_t total = 0;
        std::unordered_map<std::string, std::size_t> per_address;
        void release(const std::string& address);
    };
    std::shared_ptr<counters> counters_;
};

}  // namespace cellgate::http
