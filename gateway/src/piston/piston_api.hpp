#pragma once

// Piston's v2 API over cellgate's one-shot runs (core/runs.hpp), request
// for request and close code for close code, so Piston's clients (the
// Discord bots, editors and teaching tools the public Piston API left) work
// by changing the host. Every route is served at /api/v2/… and at
// /api/v2/piston/… (the hosted Piston's prefix):
//
//   GET    runtimes   [{language, version, aliases, runtime?}]
//   POST   execute    a job (application/json only, else 415) → {language, version, compile?, run}
//   WS     connect    {"type":"init",…} within a second; stage, data and exit events; stdin and signals
//   GET    packages   [{language, language_version, installed}]
//   POST   packages   {language, version}: a runtime that is here is installed; else 404
//   DELETE packages   409: runtimes are templates here (delete the template)
//
// Authentication as on every door (a tenant's token); Piston's clients send
// none, so an operator may open this door without one to a single tenant
// (--piston-anonymous-tenant), whose quotas and policy then apply. docs/piston.md
// has the contract.

#include "core/runs.hpp"
#include "core/runtimes.hpp"
#include "kit/services.hpp"

#include <memory>
#include <string>

namespace cellgate::piston {

struct piston_options {
    std::string anonymous_tenant;  // "" = every request needs a token
    // The configured limits (Piston's PISTON_* settings): a request may ask
    // for less, never more; what it does not ask for it gets.
    core::stage_limits compile{std::chrono::milliseconds(10000), std::chrono::milliseconds(10000), -1, 65536};
    core::stage_limits run{std::chrono::milliseconds(3000), std::chrono::milliseconds(3000), -1, 65536};
};

[[nodiscard]] std::shared_ptr<void> register_piston_api(http::router& r, kit::services& s, core::runs& runs,
                                                        core::runtime_table& runtimes, piston_options options);

}  // namespace cellgate::piston
