// The kernel channels' hooks for the transport (http/handoffs.hpp): the
// upgrade's reading of the request, and the two streams' sockets.
#include "jupyter/kernel_channels.hpp"

#include "kernels/kernel_manager.hpp"
#include "messaging/ws_codec.hpp"

namespace cellgate::jupyter {

http::channel_upgrade kernel_channels(kernels::kernel_manager& kernels) {
    http::channel_upgrade u;
    u.admit = [&kernels](const http::request_ptr& ctx, std::shared_ptr<void>& accepted) -> std::optional<http::response> {
        auto a = std::make_shared<channel_accept>();
        a->session_id = ctx->query_value("session_id").value_or("");
        if (!kernels::valid_session_id(a->session_id))
            return http::error_response(400, "session_id must be at most " + std::to_string(kernels::max_session_id_bytes) +
                                                 " printable ASCII characters");
        a->kernel = kernels.find(ctx->who.tenant, ctx->param("kernel_id"));
        if (!a->kernel) return http::error_response(404, "No such kernel");
        const auto offered = ctx->req[boost::beast::http::field::sec_websocket_protocol];
        a->v1 = http::header_list_contains(std::string_view(offered.data(), offered.size()), messaging::v1_subprotocol);
        accepted = std::move(a);
        return std::nullopt;
    };
    u.plain = &start_kernel_channels<http::plain_stream>;
    u.tls = &start_kernel_channels<http::tls_stream>;
    return u;
}

}  // namespace cellgate::jupyter
