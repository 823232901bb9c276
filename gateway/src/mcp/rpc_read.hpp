#pragma once

// One POST body of the MCP endpoint read as a JSON-RPC 2.0 message, before
// any session is looked at: the refusal it earns (HTTP status, JSON-RPC
// code, words), or what kind of message it is. Pure (fuzzed:
// fuzz/mcp_rpc_fuzzer.cpp).

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace cellgate::mcp {

struct rpc_read {
    // A refusal when status != 0: answered with `code`, `error` and `id`.
    unsigned status = 0;
    int code = 0;
    std::string error;
    nlohmann::json id = nullptr;
    // Otherwise the message, and what it is.
    nlohmann::json message;
    bool has_method = false;  // a request or a notification
    bool has_id = false;      // a request or a response
};

rpc_read read_rpc(std::string_view body);

}  // namespace cellgate::mcp
