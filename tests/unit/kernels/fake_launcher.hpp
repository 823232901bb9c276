#pragma once

#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/sandbox_launcher.hpp"
#include "fake_kernel.hpp"

#include <cerrno>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cellgate::fakes {

// A sandbox launcher without sandboxes: a launch starts a fake_kernel whose
// sockets live in <dir>/<sandbox id>/ (the same paths again on a restart, as
// a real run dir's) and forks a child that only waits, standing for the
// sandbox's init: its pid is what the gateway watches, so killing it is the
// kernel's death. It records every call, fails on demand, and remove() stops
// the kernel and reaps the child.
class fake_launcher final : public launcher::sandbox_launcher {
public:
    explicit fake_launcher(std::filesystem::path dir);
    ~fake_launcher() override;  // removes what is left

    launcher::sandbox_info launch(const launcher::sandbox_spec& spec) override;
    void signal(const std::string& id, int signal) override;
    launcher::sandbox_status status(const std::string& id) override;
    void set_cpu_shares(const std::string& id, std::uint32_t shares) override;
    launcher::sandbox_usage usage(const std::string& id, bool reset_peak) override;
    std::vector<launcher::sandbox_status> list() override;
    void remove(const std::string& id, launcher::remove_options options = {}) override;
    std::vector<std::string> reap_orphans(const std::set<std::string>& keep, bool unused_workspaces) override;
    void validate(const launcher::sandbox_spec& spec) const override;
    // Not supported: throws launch_error (the fake has no sandbox to run it in).
    launcher::exec_process exec(const std::string& id, const launcher::exec_spec& spec) override;
    // As runc: the sandbox stops and only its files stay (memory = false);
    // restore() finds no image (launch_error ENOENT).
    launcher::checkpoint_info checkpoint(const std::string& id) override;
    launcher::sandbox_info restore(const std::string& id) override;
    // Records the call; the fake keeps no files.
    launcher::snapshot_info snapshot_workspace(const std::string& id, const std::string& snapshot) override;
    void remove_snapshot(const std::string& snapshot) override;
    void create_volume(const std::string& volume, std::uint64_t bytes) override;
    launcher::volume_info volume_usage(const std::string& volume) override;
    void remove_volume(const std::string& volume) override;
    launcher::build_step_result run_build_step(const launcher::build_step_spec& spec) override;
    void remove_layer(const std::string&) override {}
    launcher::image_import_result import_image(const launcher::image_import_spec&) override {
        throw launcher::launch_error("import-image", "the fake launcher pulls no images", ENOSYS);
    }

    // --- what a test sets
    // The next `n` launches throw: launch_error (the sandbox failed), or
    // spec_error (the request was refused) when `refused`.
    void fail_launches(int n, bool refused = false);
    // The next launch starts a kernel that never answers.
    void mute_next_launch();
    // Launches wait (before they do anything) until release_launches(), as a
    // slow start does; held() is how many are waiting.
    void hold_launches();
    void release_launches();
    int held() const;
    // status() says the cgroup's OOM killer fired.
    void report_oom(bool on);
    // The sandbox dies: its child is killed (and left a zombie until
    // removed, as a dead sandbox's init is) and its kernel stops answering.
    void kill_kernel(const std::string& id);
    // The sandbox's kernel stops echoing heartbeats; its process lives on.
    void stop_heartbeat(const std::string& id);

    // --- what it saw
    // Calls in order, for one sandbox id: "launch", "remove", "remove
    // keep_workspace", "signal <n>". Launches that failed count too.
    std::vector<std::string> calls(const std::string& id) const;
    // Calls with this text, for every id.
    int count(const std::string& call) const;
    std::vector<launcher::sandbox_spec> launched() const;
    std::int64_t pid_of(const std::string& id) const;  // 0: no sandbox
    std::size_t sandboxes() const;                      // not yet removed

private:
    struct sandbox {
        std::int64_t pid = 0;
        bool killed = false;
        std::unique_ptr<fake_kernel> kernel;
    };
    void remove_locked(const std::string& id);

    const std::filesystem::path dir_;
    mutable std::mutex mutex_;
    std::map<std::string, sandbox> sandboxes_;
    std::vector<std::pair<std::string, std::string>> calls_;  // id, call
    std::vector<launcher::sandbox_spec> launched_;
    int failures_ = 0;
    bool refuse_ = false;
    bool mute_next_ = false;
    bool oom_ = false;
    bool hold_ = false;
    int held_ = 0;
    std::condition_variable released_;
};

}  // namespace cellgate::fakes
