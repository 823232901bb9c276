#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cellgate::kernels {

// Ids of what lives on one node: kernels, Jupyter and /v1 sessions,
// snapshots, volumes (issue 16, "many boxes"). They stay UUID-shaped, as
// Jupyter clients route only `\w+-\w+-\w+-\w+-\w+` ids, but once a node has a
// tag, the first group is that tag: a router (HAProxy's map, a peer node)
// sends a request carrying an id to its owner without asking anyone. The
// other 90 bits stay random (version 4 and its variant bits as in any
// UUID). Without a tag (one gateway alone) an id is a plain random UUID.
//
// The tag is set once, at start, before any id is made.
void set_node_tag(const std::string& tag);  // throws std::invalid_argument unless 8 lowercase hex digits
const std::string& node_tag();              // empty: no tag
bool valid_node_tag(std::string_view tag);

std::string make_node_id();
// The first group of a UUID-shaped id (its owner's tag when it has one).
std::optional<std::string> tag_of(std::string_view id);

}  // namespace cellgate::kernels
