#pragma once

#include "cellgate/launcher/launcher.hpp"

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace cellgate::kernels {

// What the gateway needs from whoever starts sandboxes: the launcher in this
// process (a gateway running as root), or the privileged launcher service
// over its unix socket (an unprivileged gateway). Same calls, same errors.
class sandbox_backend {
public:
    virtual ~sandbox_backend() = default;
    virtual launcher::sandbox_info launch(const launcher::sandbox_spec& spec) = 0;
    virtual void signal(const std::string& id, int signal) = 0;
    virtual launcher::sandbox_status status(const std::string& id) = 0;
    virtual void set_cpu_shares(const std::string& id, std::uint32_t shares) = 0;
    virtual std::vector<launcher::sandbox_status> list() = 0;
    virtual void remove(const std::string& id, launcher::remove_options options = {}) = 0;
    virtual std::vector<std::string> reap_orphans(const std::set<std::string>& keep = {},
                                                  bool unused_workspaces = false) = 0;
    virtual void validate(const launcher::sandbox_spec& spec) const = 0;
};

// Adapts anything with the launcher's calls (launcher::launcher, the
// service client) without either knowing about the gateway.
template <typename Launcher>
class backend_of final : public sandbox_backend {
public:
    explicit backend_of(std::unique_ptr<Launcher> l) : l_(std::move(l)) {}
    launcher::sandbox_info launch(const launcher::sandbox_spec& spec) override { return l_->launch(spec); }
    void signal(const std::string& id, int signal) override { l_->signal(id, signal); }
    launcher::sandbox_status status(const std::string& id) override { return l_->status(id); }
    void set_cpu_shares(const std::string& id, std::uint32_t shares) override { l_->set_cpu_shares(id, shares); }
    std::vector<launcher::sandbox_status> list() override { return l_->list(); }
    void remove(const std::string& id, launcher::remove_options options) override { l_->remove(id, options); }
    std::vector<std::string> reap_orphans(const std::set<std::string>& keep, bool unused_workspaces) override {
        return l_->reap_orphans(keep, unused_workspaces);
    }
    void validate(const launcher::sandbox_spec& spec) const override { l_->validate(spec); }

private:
    std::unique_ptr<Launcher> l_;
};

}  // namespace cellgate::kernels
