#include "core/session_request.hpp"

#include "agent/agent_service.hpp"

#include <algorithm>

namespace cellgate::core {

namespace {

// A time or size asked of the policy, held to its ceiling: the server's
// maximum, or the operator's value for this kernelspec or tenant when that is
// more (0 there: none, so the maximum). Asking for none (0) gets the ceiling.
template <class T>
T held(T asked, T base, T maximum) {
    const T ceiling = base == T{0} ? maximum : std::max(base, maximum);
    return asked == T{0} ? ceiling : std::min(asked, ceiling);
}

}  // namespace

kernels::kernel_policy policy_for(const session_request& r, const kernels::kernel_policy& base,
                                  const agent::agent_limits& limits) {
    kernels::kernel_policy p = base;
    const auto& ask = r.limits;
    const auto& max = limits.maxima;
    if (ask.exec_timeout) p.exec_timeout = held(*ask.exec_timeout, base.exec_timeout, max.exec_timeout);
    if (ask.lifetime) p.lifetime = held(*ask.lifetime, base.lifetime, max.lifetime);
    if (ask.idle_timeout)
        p.idle_timeout = ask.idle_timeout->count() == 0 && p.lifetime.count() > 0
                             ? std::chrono::seconds(0)
                             : held(*ask.idle_timeout, base.idle_timeout, max.idle_timeout);
    if (ask.output_limit_bytes)
        p.output_limit_bytes = held(*ask.output_limit_bytes, base.output_limit_bytes, max.output_limit_bytes);
    if (ask.result_limit_bytes)
        p.result_limit_bytes = held(*ask.result_limit_bytes, base.result_limit_bytes, max.result_limit_bytes);
    if (ask.upload_limit_bytes)
        p.upload_limit_bytes = held(*ask.upload_limit_bytes, base.upload_limit_bytes, max.upload_limit_bytes);
    if (ask.pause_on_idle) p.pause_on_idle = *ask.pause_on_idle;
    if (ask.auto_resume) p.auto_resume = *ask.auto_resume;
    if (r.pause_at_end) p.pause_at_end = *r.pause_at_end;
    return p;
}

}  // namespace cellgate::core
