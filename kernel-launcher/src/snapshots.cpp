// Workspace snapshots: a copy of a sandbox's workspace image, with the host
// uid range its files belong to, in <state dir>/snapshots/<name>/, from which
// a later launch seeds a new workspace (seed_of). The state it owns is the
// snapshots dir.

#include "cellgate/launcher/launcher.hpp"

#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "spec_validation.hpp"

#include <cerrno>

namespace cellgate::launcher {
using nlohmann::json;

snapshot_info launcher::impl::snapshot_workspace(const std::string& id, const std::string& snapshot) {
    const auto t0 = clock_type::now();
    const auto info = read_info(id);
    fs::path ws_dir = info ? fs::path(info->workspace_dir) : cfg.workspace_root / id;
    make_dir("snapshot", cfg.state_dir / "snapshots", 0700);
    const fs::path sdir = snapshot_dir(snapshot);
    make_dir("snapshot", sdir, 0700, /*must_not_exist=*/true);
    teardown_guard guard;
    guard.add([&] {
        std::error_code ec;
        fs::remove_all(sdir, ec);
    });
    const auto copy = workspaces.copy_image(ws_dir, sdir / "workspace.img");  // ENOENT: no workspace
    // Paused with its files only, a sandbox has no run dir: its slot says.
    const std::uint32_t base = info ? info->host_uid_base : workspaces.host_id_base(ws_dir);
    snapshot_info out;
    out.bytes = copy.bytes;
    out.disk_bytes = copy.disk_bytes;
    out.reflinked = copy.reflinked;
    out.ms = ms_since(t0);
    write_file("snapshot", sdir / "snapshot.json",
               json{{"source", id}, {"host_id_base", base}, {"bytes", out.bytes}, {"created_unix_ms", unix_ms_now()}}
                   .dump(),
               0600);
    guard.dismiss();
    return out;
}

std::optional<workspace_seed> launcher::impl::seed_of(const sandbox_spec& spec) const {
    if (spec.from_snapshot.empty()) return std::nullopt;
    const fs::path sdir = snapshot_dir(spec.from_snapshot);
    const auto meta = json::parse(read_file(sdir / "snapshot.json"), nullptr, false);
    if (!meta.is_object() || !meta.contains("host_id_base"))
        throw launch_error("prepare-workspace", "no snapshot '" + spec.from_snapshot + "'", ENOENT);
    return workspace_seed{sdir / "workspace.img", meta.at("host_id_base").get<std::uint32_t>()};
}

snapshot_info launcher::snapshot_workspace(const std::string& id, const std::string& snapshot) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    if (!is_valid_sandbox_id(snapshot)) throw spec_error("invalid snapshot name");
    return impl_->snapshot_workspace(id, snapshot);
}

void launcher::remove_snapshot(const std::string& snapshot) {
    if (!is_valid_sandbox_id(snapshot)) throw spec_error("invalid snapshot name");
    std::error_code ec;
    fs::remove_all(impl_->snapshot_dir(snapshot), ec);
}

}  // namespace cellgate::launcher
