#pragma once

// Which platform gVisor runs new sandboxes on, and why.
//
// "auto" asks for kvm where it works. A /dev/kvm that opens and makes VMs may
// still hang gVisor's guest with a core at 100 % (seen on nested VMs), so kvm
// is used only once proven: a start begins on ptrace at once, and a bounded
// `runsc --platform=kvm do /bin/true` runs in a background thread. Its
// verdict is kept per boot (keyed by the boot id, runsc's file and the
// device), so later starts on the same machine know it without probing, and
// only one process probes at a time (a lock beside the verdicts). The probe
// runs at the lowest CPU priority, dies with the thread that started it, and
// is killed at its bound. Nothing is probed until the platform is first
// asked for (a launcher that never starts a gVisor sandbox never probes).

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

namespace cellgate::launcher {

class runsc_platform {
public:
    struct options {
        std::string runsc = "runsc";       // the program (PATH search when it has no '/')
        std::string requested = "auto";    // auto, kvm, ptrace or systrap
        std::filesystem::path cache_dir = "/run/cellgate/runsc-platform";  // per boot; "" keeps nothing
        std::chrono::milliseconds probe_bound = std::chrono::seconds(5);
        // Whether the device makes VMs at all (resolve_runsc_platform by
        // default): "kvm", or "ptrace" with `why` set.
        std::function<std::string(std::string* why)> device_check;
        // Told each verdict in a sentence (the log).
        std::function<void(const std::string&)> note;
    };

    explicit runsc_platform(options o);

    std::string platform() const;
    std::string reason() const;
    // Waits until no probe is running, at most `bound`; true when none is.
    bool settled(std::chrono::milliseconds bound) const;

private:
    void decide() const;
    void decide_now() const;
    struct state;
    std::shared_ptr<state> state_;
};

}  // namespace cellgate::launcher
