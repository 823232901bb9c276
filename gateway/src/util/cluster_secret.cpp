#include "util/cluster_secret.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include <fstream>
#include <iterator>

namespace cellgate::util {

std::shared_ptr<const cluster_secret> cluster_secret::from_file(const std::filesystem::path& file) {
    const auto named = "the cluster secret file " + file.string();
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) throw std::runtime_error(named + " cannot be read");
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(named + " is not a regular file");
    if ((st.st_mode & 077) != 0)
        throw std::runtime_error(named + " may be read or written by others than its owner (chmod 600 it)");
    if (st.st_size > static_cast<off_t>(max_bytes)) throw std::runtime_error(named + " is larger than 4096 bytes");
    std::ifstream in(file, std::ios::binary);
    std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) throw std::runtime_error(named + " cannot be read");
    if (!key.empty() && key.back() == '\n') key.pop_back();
    if (key.size() < min_bytes)
        throw std::runtime_error(named + " holds fewer than 32 bytes (openssl rand -hex 32 makes one)");
    return std::make_shared<const cluster_secret>(std::move(key));
}

cluster_secret::cluster_secret(std::string key) : key_(std::move(key)) {}

std::string cluster_secret::sign(std::string_view purpose, std::initializer_list<std::string_view> fields) const {
    std::string text;
    auto add = [&text](std::string_view f) {
        text += std::to_string(f.size());
        text += ':';
        text += f;
        text += '\n';
    };
    add(purpose);
    for (const auto f : fields) add(f);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), reinterpret_cast<const unsigned char*>(text.data()),
         text.size(), mac, &len);
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(len * 2);
    for (unsigned int i = 0; i < len; ++i) {
        out += digits[mac[i] >> 4];
        out += digits[mac[i] & 0xf];
    }
    return out;
}

bool cluster_secret::verify(std::string_view mac, std::string_view purpose,
                            std::initializer_list<std::string_view> fields) const {
    const auto want = sign(purpose, fields);
    return mac.size() == want.size() && CRYPTO_memcmp(mac.data(), want.data(), want.size()) == 0;
}

}  // namespace cellgate::util
