#include "core/cell_request.hpp"

#include "util/api_error.hpp"

#include <algorithm>

namespace cellgate::core {

agent::execution_options cell_options(const cell_request& r, const kernels::kernel_policy& p,
                                      const agent::agent_limits& l) {
    agent::execution_options o;
    o.code = r.code;
    // A timeout asked past the ceiling is the ceiling: the session's, or the
    // gateway's maximum when that is longer (or the session has none).
    const auto ceiling = p.exec_timeout.count() == 0 ? l.maxima.exec_timeout : std::max(p.exec_timeout, l.maxima.exec_timeout);
    o.timeout = r.timeout ? std::chrono::seconds(std::clamp<long long>(r.timeout->count(), 1, ceiling.count()))
                          : std::chrono::duration_cast<std::chrono::seconds>(p.exec_timeout);
    o.output_limit_bytes = p.output_limit_bytes;
    o.result_limit_bytes = p.result_limit_bytes;
    if (r.max_output_tokens && r.max_output_bytes)
        throw api_exception(400, "Give 'max_output_tokens' or 'max_output_bytes', not both");
    if (r.max_output_tokens)
        o.budget_bytes = std::min(*r.max_output_tokens, max_budget_bytes / agent::bytes_per_token) * agent::bytes_per_token;
    if (r.max_output_bytes) o.budget_bytes = std::min(*r.max_output_bytes, max_budget_bytes);
    if ((r.max_output_tokens || r.max_output_bytes) && o.budget_bytes < min_budget_bytes)
        throw api_exception(400, "An output budget must be at least 64 tokens (256 bytes)");
    if (r.max_image_pixels) o.max_image_pixels = std::min<std::uint64_t>(*r.max_image_pixels, 64ull << 20);
    if (o.max_image_pixels < 4096) throw api_exception(400, "'max_image_pixels' must be at least 4096");
    o.env = r.env;
    o.report_files = r.report_files;
    o.inline_files = r.inline_files;
    if (r.inline_files) o.inline_files_limit_bytes = p.result_limit_bytes;
    o.output_at = r.output_at;
    o.surface = r.surface;
    return o;
}

}  // namespace cellgate::core
