#pragma once

// A single-stage Dockerfile as a template's definition (POST /v1/templates
// with "dockerfile"): the same steps a JSON definition gives, so one parser
// (definition.hpp) judges both. Pure.
//
//   FROM        python[:…] or debian[:…] (and their library/ and docker.io/
//               names) → that built-in image; anything else names a template
//               of the tenant's (this gateway pulls no registry image).
//               A second FROM (multi-stage) is refused.
//   RUN         shell form, or exec form (its words quoted for sh)
//   COPY / ADD  [--chown=u[:g]] [--chmod=mode] src… dest, from the archive
//               uploaded with it; ADD of a URL is refused
//   ENV, ARG    ARG's default or the request's build_args, and ENV's values,
//               substituted in later instructions ($X, ${X}, ${X:-d}, ${X:+a})
//   WORKDIR, USER
//   CMD / ENTRYPOINT  the start command (ENTRYPOINT then CMD)
//   LABEL, EXPOSE, STOPSIGNAL, HEALTHCHECK NONE: accepted, change nothing
//   anything else (VOLUME, SHELL, ONBUILD, HEALTHCHECK CMD, …): 400 saying which line

#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace cellgate::templates {

// The definition's "from", "steps" and "start_cmd" for `text`, its COPY
// steps naming `files` (the key of the archive uploaded with it; empty: a
// COPY is refused). api_exception(400) naming the line for what it cannot
// take. At most 1 MiB of text.
nlohmann::json dockerfile_definition(const std::string& text, const std::string& files,
                                     const std::map<std::string, std::string>& build_args);

// POST /v1/templates' body: one with "dockerfile" (and "files", the key its
// archive was uploaded under; "build_args") as the definition it stands
// for, the body's other fields (name, tag, kernel, resources, ready_cmd, …)
// kept; any other body as it is. 400 for one with both a Dockerfile and
// from, steps or packages.
nlohmann::json expand_dockerfile(const nlohmann::json& body);

}  // namespace cellgate::templates
