#include "config/options.hpp"

#include <algorithm>

namespace cellgate::config {

const std::vector<section>& sections() {
    static const std::vector<section> all = {
        {heading::running, ""},
        {heading::listening, ""},
        {heading::state, ""},
        {heading::node,
         "Per node: what two cellgate instances on one host must not share, and how this node's sandboxes run. "
         "With `--launcher-socket` these are `cellgate-launchd`'s to give ([below](#with-cellgate-launchd)); "
         "the gateway's own are then unused. [sandbox.md](sandbox.md) describes the sandbox."},
        {heading::admission,
         "Counted at admission, so concurrent starts cannot race past a cap. Past one a request gets `429` "
         "with a `{\"reason\", \"message\"}` body ([limits.md](limits.md))."},
        {heading::kernels, ""},
        {heading::pool,
         "Warm sandboxes of the default kernelspec, started ahead of demand at a low CPU weight with modules "
         "already imported: a create that claims one is a pop, not a start. `/metrics`: "
         "`cellgate_pool_{ready,starting,waiting,target,target_max}`, `cellgate_pool_{claims,misses,waited}_total`; "
         "[sessions.md](sessions.md) tells how claims wait and the pool grows."},
        {heading::jupyter_limits,
         "The defaults of kernels started over `/api/kernels` and `/api/sessions` (JupyterLab, Kernel Gateway "
         "clients, `jupyter_server --gateway-url`). Every session carries one policy, resolved when it starts and "
         "enforced on every surface; only the defaults differ per surface. A kernelspec's and a tenant's `policy` "
         "in the config file override them (surface default, then kernelspec, then tenant; see "
         "[`tokens`](#tokens)). `0` means none. Past a limit the cell gets a notice as ordinary stream output; "
         "nothing closes the socket. A kernel's limits are in its model: `GET /api/kernels/{id}` → "
         "`cellgate.limits`. [limits.md](limits.md) has the whole model."},
        {heading::agent_limits,
         "The defaults of `/v1` agent sessions (E2B sandboxes and MCP sessions are such sessions), and the most "
         "a request may ask for (`timeout_s`, `idle_timeout_s`, `lifetime_s`, `output_limit_bytes`), or what its "
         "kernelspec's or tenant's policy allows when that is more. `0` means none."},
        {heading::egress,
         "Sandboxes have no network unless a session asks for one, and then reach only the names it lists, "
         "through the gateway's audited egress proxy ([egress.md](egress.md)). The config file also takes "
         "[`egress_secrets`](#egress_secrets), [`egress_presets`](#egress_presets), and `network` on a "
         "kernelspec and on a token entry."},
        {heading::cluster,
         "A node of a cluster behind a router: [cluster.md](cluster.md) has the design and its failure modes, "
         "`deploy/` the router, systemd units and Kubernetes manifests."},
        {heading::connections, ""},
        {heading::threads, ""},
        {heading::surfaces, ""},
        {heading::file_only,
         "Keys whose values are arrays or objects. The examples are whole config files; each parses as shown "
         "(the unit test reads them)."},
    };
    return all;
}

const std::vector<option>& options() {
    static const std::vector<option> table = [] {
        auto all = command_line_options();
        for (auto& o : file_only_options()) all.push_back(std::move(o));
        return all;
    }();
    return table;
}

const option* find_option(std::string_view name) {
    const auto& all = options();
    const auto it = std::find_if(all.begin(), all.end(), [&](const option& o) { return o.name == name; });
    return it == all.end() ? nullptr : &*it;
}

std::string command_line_name(std::string_view name) {
    std::string out = "--";
    for (const char ch : name) out += ch == '_' ? '-' : ch;
    return out;
}

}  // namespace cellgate::config
