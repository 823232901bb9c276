#include "util/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

namespace cellgate::util {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

http_reply http_call(const std::string& method, const std::string& host, const std::string& port,
                     const std::string& target, const std::vector<std::pair<std::string, std::string>>& headers,
                     const std::string& body, std::chrono::milliseconds timeout) {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
    req.set(bhttp::field::host, host + ":" + port);
    for (const auto& [name, value] : headers) req.set(name, value);
    if (!body.empty()) {
        req.body() = body;
        req.prepare_payload();
    }
    bhttp::response<bhttp::string_body> res;
    beast::flat_buffer buffer;
    boost::system::error_code failed;
    asio::ip::tcp::resolver resolver(ioc);
    stream.expires_after(timeout);
    resolver.async_resolve(host, port, [&](boost::system::error_code ec, auto results) {
        if (ec) return void(failed = ec);
        stream.async_connect(results, [&](boost::system::error_code ec2, auto) {
            if (ec2) return void(failed = ec2);
            bhttp::async_write(stream, req, [&](boost::system::error_code ec3, std::size_t) {
                if (ec3) return void(failed = ec3);
                bhttp::async_read(stream, buffer, res, [&](boost::system::error_code ec4, std::size_t) {
                    if (ec4) failed = ec4;
                });
            });
        });
    });
    // The stream's deadline ends a hung connect, write or read; this bounds
    // the name lookup too.
    ioc.run_for(timeout + std::chrono::milliseconds(100));
    if (!ioc.stopped()) failed = asio::error::timed_out;
    if (failed) throw http_failure(host + ":" + port + ": " + failed.message());
    return {res.result_int(), std::move(res.body())};
}

}  // namespace cellgate::util
