// Taking sandboxes down: destroy (the reverse of launch, every step tried),
// remove (a sandbox, its paused image and, unless kept, its workspace), and
// reap_orphans, which finds what belongs to no live sandbox across the
// runtimes' containers, the run dirs, the paused dirs, the cgroups under the
// node's parent and the workspaces. It owns no state of its own: it reads
// and removes what the other parts made.

#include "cellgate/launcher/launcher.hpp"

#include "cgroups.hpp"
#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "relay_process.hpp"
#include "spec_validation.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <exception>
#include <set>

namespace cellgate::launcher {

void launcher::impl::destroy(const std::string& id, const std::string& runtime_name,
                             const std::optional<fs::path>& workspace_to_remove) {
    // Every step runs even when an earlier one failed; the first failure is
    // reported once all have had their go.
    std::exception_ptr first;
    auto attempt = [&first](auto&& fn) {
        try {
            fn();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    };
    // The sandbox's end kills its execs anyway; saying so first lets each
    // report SIGKILL even where the runtime cannot tell (runsc).
    for (const auto& e : execs.live(id)) e->send_signal(SIGKILL);
    if (auto it = runtimes.find(runtime_name); it != runtimes.end()) {
        try {
            it->second->kill(id, SIGKILL, true);  // delete --force kills too
        } catch (...) {
        }
        attempt([&] { it->second->remove(id); });
    }
    // A relay ends by itself once its sandbox is gone; one that does not is killed.
    attempt([&] { stop_relay(run_dir(id), std::chrono::seconds(1)); });
    attempt([&] {
        const auto left = remove_cgroup(cgroup_path_of(cfg, id), /*kill_busy=*/true);
        if (!left.empty())
            throw launch_error("remove-cgroup", "cgroup still busy: " + left.front(), EBUSY);
    });
    const auto dir = run_dir(id);
    attempt([&] {
        for (const auto& m : mounts_under(dir)) unmount("remove-run-dir", m);
        if (::rmdir(dir.c_str()) != 0 && errno != ENOENT)
            throw launch_error("remove-run-dir", "rmdir " + dir.string(), errno);
    });
    if (workspace_to_remove) attempt([&] { workspaces.remove(*workspace_to_remove); });
    if (first) std::rethrow_exception(first);
}

void launcher::remove(const std::string& id, remove_options options) {
    if (!is_valid_sandbox_id(id)) throw spec_error("invalid sandbox id");
    const auto spec = impl_->read_spec(id);
    std::optional<fs::path> ws;
    if (!options.keep_workspace) {
        if (spec && !spec->workspace_dir.empty())
            ws = fs::path(spec->workspace_dir);
        else if (!spec)
            // No run dir (a restart that failed removed it): the workspace, if
            // any, is the one named after the sandbox, as reap_orphans finds it.
            ws = config_.workspace_root / id;
    }
    const std::string runtime_name = spec ? spec->runtime : "runc";
    impl_->destroy(id, runtime_name, ws);
    std::error_code ec;
    fs::remove_all(impl_->paused_dir(id), ec);
}

std::vector<std::string> launcher::reap_orphans(const std::set<std::string>& keep,
                                                bool unused_workspaces) {
    std::vector<std::string> removed;
    std::set<std::string> with_run_dir;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(impl_->sandboxes_dir(), ec))
        with_run_dir.insert(e.path().filename().string());
    std::set<std::string> known;
    for (const auto& [name, rt] : impl_->runtimes) {
        for (const auto& c : rt->list()) {
            known.insert(c.id);
            if (keep.count(c.id) != 0) continue;
            const bool orphan = with_run_dir.count(c.id) == 0;
            if (orphan || c.status == "stopped") {
                try {
                    if (orphan)
                        impl_->destroy(c.id, name, std::nullopt);
                    else
                        remove(c.id);
                    removed.push_back(c.id);
                } catch (...) {
                }
            }
        }
    }
    // Run dirs whose container never started or is gone.
    for (const auto& id : with_run_dir) {
        if (known.count(id) != 0 || keep.count(id) != 0 || !is_valid_sandbox_id(id)) continue;
        try {
            remove(id);
            removed.push_back(id);
        } catch (...) {
        }
    }
    // Paused sandboxes nobody keeps: their image and workspace go.
    for (const auto& e : fs::directory_iterator(config_.state_dir / "paused", ec)) {
        const auto id = e.path().filename().string();
        if (keep.count(id) != 0 || !is_valid_sandbox_id(id) || with_run_dir.count(id) != 0) continue;
        try {
            remove(id);
            removed.push_back("paused:" + id);
        } catch (...) {
        }
    }
    // Cgroups nobody owns any more.
    for (const auto& id : cgroup_children(cgroup_parent_of(config_))) {
        // Only sandbox-shaped names: a nested instance's parent is never ours.
        if (known.count(id) != 0 || keep.count(id) != 0 || !is_valid_sandbox_id(id)) continue;
        if (remove_cgroup(cgroup_path_of(config_, id)).empty() &&
            std::find(removed.begin(), removed.end(), id) == removed.end())
            removed.push_back("cgroup:" + id);
    }
    if (unused_workspaces) {
        // Workspaces that no remaining sandbox mounts and nobody asked to keep.
        std::set<std::string> in_use;
        for (const auto& e : fs::directory_iterator(impl_->sandboxes_dir(), ec))
            if (const auto spec = impl_->read_spec(e.path().filename().string()))
                in_use.insert(fs::path(spec->workspace_dir).filename().string());
        for (const auto& e : fs::directory_iterator(config_.state_dir / "paused", ec))
            if (const auto spec = impl_->read_spec(e.path().filename().string()))
                in_use.insert(fs::path(spec->workspace_dir).filename().string());
        std::set<std::string> names;
        for (const auto& e : fs::directory_iterator(config_.workspace_root, ec)) {
            auto name = e.path().filename().string();
            if (name.size() > 4 && name.ends_with(".img")) name.resize(name.size() - 4);
            if (is_valid_sandbox_id(name)) names.insert(name);
        }
        for (const auto& name : names) {
            if (in_use.count(name) != 0 || keep.count(name) != 0) continue;
            try {
                impl_->workspaces.remove(config_.workspace_root / name);
                removed.push_back("workspace:" + name);
            } catch (...) {
            }
        }
    }
    impl_->workspaces.reap_slots();
    return removed;
}

}  // namespace cellgate::launcher
