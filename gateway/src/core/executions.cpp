#include "core/executions.hpp"

namespace cellgate::core {

executions::executions(kernels::kernel_manager& kernels, agent::agent_service& agents)
    : kernels_(kernels), agents_(agents) {}

std::optional<not_run> executions::ready(const kernels::kernel_ptr& k) {
    if (k->state() == kernels::kernel_state::paused) {
        if (!k->policy().auto_resume)
            return not_run{{kernels::failure_kind::busy, "The session is paused and resumes only when asked: resume it first."}, std::nullopt};
        kernels_.resume(k, [](std::optional<kernels::failure>) {});
    }
    if (k->state() != kernels::kernel_state::dead) return std::nullopt;
    const bool restarting = kernels_.revive(k) || k->state() == kernels::kernel_state::restarting;
    return not_run{{kernels::failure_kind::unavailable,
                    restarting ? "The session's kernel is dead and is being restarted: its variables are lost, its files "
                                 "are kept. Try again in a few seconds."
                               : "The session's kernel is dead and is not being restarted now (it failed to start "
                                 "recently, or restarted too often); its files are kept. Try again later, restart it, "
                                 "or start a new session."},
                   std::chrono::seconds(2)};
}

agent::execution_options executions::options(const kernels::kernel& k, const cell_request& r) const {
    auto o = cell_options(r, k.policy(), agents_.limits());
    if (o.budget_bytes > 0 && r.keep_output) o.spool_dir = agents_.spool_dir(k.id());
    return o;
}

std::shared_ptr<agent::execution> executions::run(const kernels::kernel_ptr& k, agent::execution_options options,
                                                  agent::execution::event_fn on_event, agent::execution::done_fn on_done) {
    return agents_.submit(k, std::move(options), std::move(on_event), std::move(on_done));
}

void executions::cancel(const std::string& kernel_id, const std::shared_ptr<agent::execution>& e) { agents_.cancel(kernel_id, e); }

}  // namespace cellgate::core
