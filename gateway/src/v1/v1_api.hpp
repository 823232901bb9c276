#pragma once

// The agent API, /v1: sessions, executions and their ledger, files, one-shot
// runs, snapshots and fork, workspace archives, volumes, networks and
// commands (docs/agent-api.md). Over the core, through the kit.

#include "contents/beneath.hpp"
#include "kit/services.hpp"

#include <memory>

namespace cellgate::agent { class agent_service; }
namespace cellgate::processes { class process_table; }

namespace cellgate::v1 {

using kit::services;

void register_agent_api(http::router& r, services& s, agent::agent_service& agents);  // /v1
// /v1 snapshots and fork (snapshots_api.cpp; called by register_agent_api).
void register_snapshots(http::router& r, services& s, agent::agent_service& agents);
nlohmann::json snapshot_model(const kernels::snapshot_record& snap);
// /v1 workspace archives (workspace_api.cpp; called by register_agent_api
// after POST /v1/sessions exists): GET/PUT …/workspace, and POST
// /v1/sessions with a tar or form body.
void register_workspace_api(http::router& r, services& s, agent::agent_service& agents);
// An upload's body streamed to an unnamed temporary file, at most
// `max_bytes`, the tenant's staging share held until the request is done;
// kept_upload(req) is that file, once the body is in (workspace_api.cpp).
http::upload_target staged_upload(services& s, const http::request_ptr& req, std::uint64_t max_bytes);
std::shared_ptr<contents::beneath::unique_fd> kept_upload(const http::request_ptr& req);
// /v1/volumes (volumes_api.cpp; called by register_agent_api).
void register_volumes(http::router& r, services& s);
// GET/PATCH /v1/sessions/{id}/network and GET …/network/log (network_api.cpp).
void register_network_api(http::router& r, services& s, core::network_settings& settings);
// /v1/templates: build, list, show and delete a tenant's templates, and follow a build (templates_api.cpp).
void register_templates_api(http::router& r, services& s);
void register_commands_api(http::router& r, services& s, processes::process_table& table);  // /v1/sessions/{id}/commands

}  // namespace cellgate::v1
