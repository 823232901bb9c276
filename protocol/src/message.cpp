#include "cellgate/protocol/message.hpp"

#include <openssl/rand.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>

namespace cellgate::protocol {

std::string make_uuid() {
    std::array<unsigned char, 16> b{};
    if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1)
        throw std::runtime_error("make_uuid: the OS random source failed");
    b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
    b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(36);
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
        out.push_back(digits[b[i] >> 4]);
        out.push_back(digits[b[i] & 0x0f]);
    }
    return out;
}

std::string now_iso8601() {
    using namespace std::chrono;
    const auto now = system_clock::now();
    const auto micros = duration_cast<microseconds>(now.time_since_epoch()).count() % 1000000;
    const std::time_t secs = system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<long long>(micros));
    return buf;
}

message make_message(std::string_view msg_type, const nlohmann::json& content,
                     std::string_view session, std::string_view username, std::string parent) {
    nlohmann::json header = {{"msg_id", make_uuid()},
                             {"msg_type", msg_type},
                             {"session", session},
                             {"username", username},
                             {"date", now_iso8601()},
                             {"version", protocol_version}};
    message m;
    m.header = header.dump();
    m.parent_header = std::move(parent);
    m.content = content.dump();
    return m;
}

}  // namespace cellgate::protocol
