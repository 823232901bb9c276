#pragma once

// Code contexts (E2B's createCodeContext): more Python interpreters in a
// sandbox, each with its own variables, sharing the sandbox's files, limits
// and confinement with its kernel. The sandbox's kernel is the "default"
// context; each other one is a cellgate-context process (images/python), or
// for another language the languages image's `cellgate-kernel --context`, that
// the process table runs with the launcher's exec, driven over its pipes one
// JSON object per line. A context runs one cell at a time and queues the
// rest; a cell's events use the agent's names (stdout, stderr, display,
// result, error) and its end the agent's result shape, so /execute encodes
// both kinds of context the same way. Each cell that runs is reported to
// the session's ledger through its kernel (kernel::report_cell), as the
// kernel's own cells are.
//
// Bounds: contexts per sandbox (and the process table's own per-session
// cap), queued cells per context, the size of one message from the
// interpreter (48 MiB while a cell runs, 64 KiB otherwise) and its JSON
// nesting, the partial lines of all contexts together (a gateway-wide
// budget), each cell's time and output limits (the session's policy).

#include "kernels/kernel.hpp"
#include "processes/process_table.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cellgate::e2b {

struct context_limits {
    std::size_t per_sandbox = 8;
    std::size_t queued_cells = 16;  // per context, the running one included
    std::chrono::seconds start_timeout{60};
    // Partial lines from every context's interpreter held at once, gateway-wide
    // (one line may be up to 48 MiB while a cell runs, 64 KiB while none does).
    std::size_t partial_line_bytes = 256u << 20;
};

struct context_info {
    std::string id, language, cwd;  // cwd as the sandbox sees it
};

struct cell_request {
    std::string code;
    std::map<std::string, std::string> env;
    std::chrono::seconds timeout{300};
    std::size_t output_limit_bytes = 1u << 20;
    std::size_t result_limit_bytes = 32u << 20;
    // After the time limit's SIGINT, before the interpreter is killed: the
    // gateway's one grace for every cell (--cell-interrupt-grace).
    std::chrono::milliseconds interrupt_grace{5000};
};

class context;  // one interpreter (code_contexts.cpp)
struct cell;
struct line_budget;

class code_contexts {
public:
    using event_fn = std::function<void(const std::string& event, const nlohmann::json& data)>;
    using done_fn = std::function<void(nlohmann::json result)>;  // {status, execution_count, error}
    using created_fn = std::function<void(const context_info*, unsigned status, std::string why)>;
    using status_fn = std::function<void(unsigned status, std::string why)>;  // 0: done

    code_contexts(processes::process_table& table, context_limits limits = {});
    ~code_contexts();

    // Starts one in `k`'s sandbox and answers once it is ready for code.
    // `language` is one of the kernelspec's context_languages (the caller
    // checks); `env` is the sandbox's own environment (E2B's create-time
    // envVars).
    void create(const kernels::kernel_ptr& k, std::string language, std::string cwd, std::map<std::string, std::string> env,
                created_fn done);
    // The context a cell that names only a language runs in (E2B's default
    // context per language): made on first use, without waiting for it to be
    // ready (its cells queue). Empty, with `why`, when the sandbox has its
    // limit of contexts.
    std::string for_language(const kernels::kernel_ptr& k, const std::string& language, std::string cwd,
                             std::map<std::string, std::string> env, std::string& why);
    std::vector<context_info> list(const std::string& kernel_id) const;
    bool exists(const std::string& kernel_id, const std::string& id) const;
    // A fresh interpreter in its place: same id, cwd and environment.
    void restart(const kernels::kernel_ptr& k, const std::string& id, status_fn done);
    bool remove(const std::string& kernel_id, const std::string& id);
    // Queues a cell; null when there is no such context or its queue is full
    // (`why` says which, `status` the fitting HTTP status).
    std::shared_ptr<cell> execute(const kernels::kernel_ptr& k, const std::string& id, cell_request r, event_fn on_event,
                                  done_fn done, unsigned& status, std::string& why);
    // The client left: a queued cell is dropped, a running one interrupted.
    void cancel(const std::shared_ptr<cell>& c);
    void remove_session(const std::string& kernel_id);

private:
    std::shared_ptr<context> find(const std::string& kernel_id, const std::string& id) const;
    // A new context in `k`'s sandbox, within its limit (else null and `why`); under mutex_.
    std::shared_ptr<context> add_locked(const kernels::kernel_ptr& k, std::string language, std::string cwd,
                                        std::map<std::string, std::string> env, std::string& why);
    void start(const kernels::kernel_ptr& k, const std::shared_ptr<context>& ctx, status_fn done);

    processes::process_table& table_;
    const context_limits limits_;
    const std::shared_ptr<line_budget> lines_;
    mutable std::mutex mutex_;
    std::map<std::string, std::map<std::string, std::shared_ptr<context>>> by_sandbox_;
    std::map<std::string, std::map<std::string, std::string>> by_language_;  // sandbox → language → its default context
};

}  // namespace cellgate::e2b
