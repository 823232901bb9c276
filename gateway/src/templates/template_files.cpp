#include "templates/template_files.hpp"

#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>

namespace cellgate::templates {

namespace fs = std::filesystem;

namespace {

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

}  // namespace

file_store::file_store(fs::path dir) : dir_(std::move(dir)) {}

bool file_store::valid_key(const std::string& key) {
    return key.size() >= 8 && key.size() <= 128 && std::all_of(key.begin(), key.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
           });
}

fs::path file_store::tenant_dir(const std::string& tenant) const { return dir_ / sha256_hex(tenant).substr(0, 16); }

std::map<std::string, file_store::entry>& file_store::shelf_locked(const std::string& tenant) {
    const auto found = shelves_.find(tenant);
    if (found != shelves_.end()) return found->second;
    auto& shelf = shelves_[tenant];
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(tenant_dir(tenant), ec)) {
        const auto key = f.path().filename().string();
        if (!valid_key(key) || !f.is_regular_file(ec)) continue;
        std::ifstream in(f.path().string() + ".sha256");
        std::string digest;
        in >> digest;
        if (digest.size() != 64) continue;  // a commit that did not finish
        entry e;
        e.archive = {f.path(), digest, static_cast<std::uint64_t>(f.file_size(ec))};
        e.used_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        fs::last_write_time(f.path(), ec).time_since_epoch()).count();
        shelf[key] = e;
    }
    return shelf;
}

std::optional<file_archive> file_store::find(const std::string& tenant, const std::string& key) {
    if (!valid_key(key)) return std::nullopt;
    std::lock_guard lock(mutex_);
    auto& shelf = shelf_locked(tenant);
    const auto it = shelf.find(key);
    if (it == shelf.end()) return std::nullopt;
    std::error_code ec;
    if (!fs::exists(it->second.archive.path, ec)) {
        shelf.erase(it);
        return std::nullopt;
    }
    it->second.used_ms = now_ms();
    return it->second.archive;
}

int file_store::begin(const std::string& tenant) {
    const auto dir = tenant_dir(tenant);
    std::error_code ec;
    fs::create_directories(dir, ec);
    const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) throw api_exception(500, "cannot make a file for the upload");
    return fd;
}

file_archive file_store::commit(const std::string& tenant, const std::string& key, int fd, std::uint64_t max_bytes) {
    if (!valid_key(key)) throw api_exception(400, "A files key is 8 to 128 of [A-Za-z0-9_-]");
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw api_exception(500, "cannot read the upload back");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size > max_bytes)
        throw api_exception(413, "The archive (" + std::to_string(size) + " bytes) is larger than this tenant's "
                                 "template storage has room for (" + std::to_string(max_bytes) + " bytes)");
    const auto digest = sha256_hex_of_file(fd);
    if (!digest) throw api_exception(500, "cannot read the upload back");
    const auto dir = tenant_dir(tenant);
    const auto path = dir / key;
    std::lock_guard lock(mutex_);
    auto& shelf = shelf_locked(tenant);
    std::error_code ec;
    // Room first: the least recently used go until it fits.
    auto held = [&] {
        std::uint64_t total = size;
        for (const auto& [k, e] : shelf)
            if (k != key) total += e.archive.bytes;
        return total;
    };
    while ((held() > max_bytes || shelf.size() - shelf.count(key) >= max_archives_per_tenant) && !shelf.empty()) {
        auto oldest = shelf.end();
        for (auto it = shelf.begin(); it != shelf.end(); ++it)
            if (it->first != key && (oldest == shelf.end() || it->second.used_ms < oldest->second.used_ms)) oldest = it;
        if (oldest == shelf.end()) break;
        fs::remove(oldest->second.archive.path, ec);
        fs::remove(oldest->second.archive.path.string() + ".sha256", ec);
        shelf.erase(oldest);
    }
    fs::remove(path, ec);
    const auto proc = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) != 0)
        throw api_exception(500, "cannot keep the uploaded archive");
    {
        std::ofstream out(path.string() + ".sha256", std::ios::trunc);
        out << *digest << "\n";
    }
    entry e;
    e.archive = {path, *digest, size};
    e.used_ms = now_ms();
    shelf[key] = e;
    return e.archive;
}

file_archive file_store::put(const std::string& tenant, const std::string& key, std::string_view bytes,
                              std::uint64_t max_bytes) {
    const int fd = begin(tenant);
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } close_fd{fd};
    for (std::size_t at = 0; at < bytes.size();) {
        const auto n = ::write(fd, bytes.data() + at, bytes.size() - at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw api_exception(500, "cannot keep the uploaded files");
        at += static_cast<std::size_t>(n);
    }
    return commit(tenant, key, fd, max_bytes);
}

std::uint64_t file_store::bytes(const std::string& tenant) {
    std::lock_guard lock(mutex_);
    std::uint64_t total = 0;
    for (const auto& [_, e] : shelf_locked(tenant)) total += e.archive.bytes;
    return total;
}

}  // namespace cellgate::templates
