#include "util/every.hpp"

#include <boost/asio/steady_timer.hpp>

#include <memory>

namespace cellgate::util {

std::function<void()> every(boost::asio::io_context& io, std::chrono::milliseconds interval, std::function<void()> tick) {
    struct ticker {
        boost::asio::steady_timer timer;
        std::function<void()> tick;
        std::chrono::milliseconds interval;
    };
    auto t = std::make_shared<ticker>(ticker{boost::asio::steady_timer(io), std::move(tick), interval});
    auto arm = std::make_shared<std::function<void()>>();
    *arm = [weak = std::weak_ptr(t), arm_weak = std::weak_ptr(arm)] {
        auto self = weak.lock();
        if (!self) return;
        self->timer.expires_after(self->interval);
        self->timer.async_wait([weak, arm_weak](const boost::system::error_code& ec) {
            auto alive = weak.lock();
            auto again = arm_weak.lock();
            if (ec || !alive || !again) return;
            alive->tick();
            (*again)();
        });
    };
    (*arm)();
    // The caller's handle owns the ticker: dropping or calling it stops the ticks.
    auto stop = std::make_shared<std::pair<std::shared_ptr<ticker>, std::shared_ptr<std::function<void()>>>>(t, arm);
    return [stop] {
        if (stop->first) stop->first->timer.cancel();
        stop->first.reset();
        stop->second.reset();
    };
}

}  // namespace cellgate::util
