#include "core/files.hpp"

namespace cellgate::core {

std::unique_ptr<contents::contents_store> open_files(const kernels::kernel_ptr& k, unsigned restarting_status) {
    const auto sb = k->sandbox();
    if (!sb && k->state() == kernels::kernel_state::paused)
        // Taken back paused by a restarted gateway: its sandbox's record comes with the resume.
        throw api_exception(409, "The session is paused; its files are kept and come back with it: resume it "
                                 "(or send it a cell) first");
    // Between the two sandboxes of a restart.
    if (!sb)
        throw api_exception(restarting_status,
                            "The session's workspace is not ready (its kernel is restarting); try again in a moment");
    return guarded([&] {
        return std::make_unique<contents::contents_store>(sb->workspace_dir, sb->host_uid_base + sb->spec.uid,
                                                          sb->host_uid_base + sb->spec.gid);
    });
}

unsigned contents_status(contents::error_kind k) noexcept {
    switch (k) {
    case contents::error_kind::bad_path: return 400;
    case contents::error_kind::not_found: return 404;
    case contents::error_kind::conflict: return 409;
    case contents::error_kind::too_large: return 413;
    case contents::error_kind::no_space: return 507;
    case contents::error_kind::forbidden: return 403;
    case contents::error_kind::io: return 500;
    }
    return 500;
}

}  // namespace cellgate::core
