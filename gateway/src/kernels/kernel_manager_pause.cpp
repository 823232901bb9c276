// The kernel manager's pause and resume. A pause stops the sandbox through
// the launcher's checkpoint(): under a runtime that checkpoints (runsc) the
// kernel's memory goes to disk with it and resume() restores the same kernel;
// otherwise (runc: CRIU does not work on this host's kernel) only the files
// are kept and resume() starts a new kernel on them, which the kernel model
// says (cellgate.pause.resumed_from = "files"), so nobody takes it for a
// memory restore. Either way the sandbox holds no CPU and no memory while
// paused, and the kernel keeps its id, its owner and its clients' sessions.
#include "kernels/kernel_manager.hpp"

#include "cellgate/launcher/launch_error.hpp"

#include "util/log_safe.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace cellgate::kernels {

namespace asio = boost::asio;

void kernel_manager::pause(const kernel_ptr& k, done callback) {
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end()) return callback(failure{failure_kind::no_such_kernel, "No such kernel"});
        if (it->second.resuming) {
            // A cell resumed it a moment ago: it pauses again once it is up.
            it->second.pause_after_resume.push_back(std::move(callback));
            return;
        }
        if (it->second.busy_lifecycle)
            return callback(failure{failure_kind::busy, "The kernel is restarting or pausing"});
        if (k->state() == kernel_state::paused) return callback(std::nullopt);
        it->second.busy_lifecycle = true;
    }
    // Messages sent from here on wait in the kernel's queue: a resume sends them.
    k->set_state(kernel_state::restarting);
    reactor_.suspend_kernel(k->id());
    launches_.submit(k->tenant(), [this, k, callback = std::move(callback)] {
        launcher::checkpoint_info c;
        std::string note;
        wait_for_copies(k->id());  // a snapshot being copied from its workspace
        try {
            c = launcher_.checkpoint(k->id());
        } catch (const std::exception& e) {
            // The checkpoint failed (or there was no running sandbox): the
            // launcher has stopped it and kept its files; so is the pause.
            note = e.what();
            spdlog::warn("kernel {}: its memory could not be saved; paused with its files only: {}", k->id(),
                         util::log_safe(note));
            try {
                launcher_.remove(k->id(), {.keep_workspace = true});
            } catch (const std::exception& e2) {
                spdlog::error("kernel {}: removing its sandbox failed: {}", k->id(), e2.what());
            }
        }
        asio::post(ioc_, [this, k, c, note, callback] {
            if (!is_registered(k)) {
                // Deleted while it paused: what the pause kept goes too.
                asio::post(launch_pool_, [this, k] {
                    try {
                        launcher_.remove(k->id());
                    } catch (const std::exception& e) {
                        spdlog::error("kernel {}: removing what its pause kept failed: {}", k->id(), e.what());
                    }
                });
                return callback(failure{failure_kind::no_such_kernel, "The kernel was shut down"});
            }
            finish_pause(k, c, note);
            callback(std::nullopt);
        });
    });
}

void kernel_manager::finish_pause(const kernel_ptr& k, launcher::checkpoint_info c, const std::string& note) {
    auto p = k->pause_info();
    p.mode = c.memory ? "memory" : "files";
    p.since = std::chrono::system_clock::now();
    p.image_bytes = c.image_bytes;
    p.failed.clear();
    ++p.pauses;
    k->set_pause_info(p);
    wake_on_demand(k);
    bool waiting = false;
    {
        std::lock_guard lock(mutex_);
        if (auto it = kernels_.find(k->id()); it != kernels_.end()) {
            it->second.busy_lifecycle = false;
            it->second.died_while_busy.reset();  // the sandbox's end was the pause
        }
        k->set_state(kernel_state::paused);
        waiting = k->has_waiting_messages();
    }
    if (store_) store_->set_paused(k->id(), p.mode, p.since, p.image_bytes);
    ++metrics_.kernel_pauses;
    spdlog::info("kernel {}: paused ({}{}{} ms{})", k->id(), c.memory ? "memory and files kept, " : "files kept, ",
                 c.memory ? std::to_string(c.image_bytes >> 20) + " MiB image, " : std::string(),
                 static_cast<long long>(c.ms), note.empty() ? "" : "; its memory could not be saved");
    // Someone sent a message while it paused: it waits for a resume.
    if (waiting) resume_on_demand(k);
}

void kernel_manager::wake_on_demand(const kernel_ptr& k) {
    std::weak_ptr<kernel> weak = k;
    k->on_wanted([this, weak] {
        if (auto alive = weak.lock()) resume_on_demand(alive);
    });
}

void kernel_manager::resume_on_demand(const kernel_ptr& k) {
    if (!k->policy().auto_resume) return;
    resume(k, [id = k->id()](std::optional<failure> f) {
        if (f) spdlog::warn("kernel {}: resuming it for a request failed: {}", id, util::log_safe(f->message));
    });
}

void kernel_manager::resume(const kernel_ptr& k, done callback) {
    std::map<std::string, std::string> env;
    {
        std::lock_guard lock(mutex_);
        const auto it = kernels_.find(k->id());
        if (it == kernels_.end()) return callback(failure{failure_kind::no_such_kernel, "No such kernel"});
        if (it->second.resuming) {
            it->second.resume_waiters.push_back(std::move(callback));
            return;
        }
        if (k->state() != kernel_state::paused) {
            if (it->second.busy_lifecycle)
                return callback(failure{failure_kind::busy, "The kernel is restarting or pausing"});
            return callback(std::nullopt);  // running already
        }
        it->second.busy_lifecycle = true;
        it->second.resuming = true;
        it->second.resume_waiters.push_back(std::move(callback));
        env = it->second.env;
    }
    k->set_state(kernel_state::starting);
    const auto mode = k->pause_info().mode;
    const auto spec = spec_for(*k, env);
    launches_.submit(k->tenant(), [this, k, mode, spec] {
        const auto t0 = steady::now();
        launcher::sandbox_info info;
        std::string from = mode;
        try {
            prepare_egress(*k, spec);
            if (mode == "memory") {
                try {
                    info = launcher_.restore(k->id());
                } catch (const cellgate::launcher::launch_error& e) {
                    // No image or run dir left (the host restarted): the files are all there is.
                    if (e.error_number() != ENOENT) throw;
                    spdlog::warn("kernel {}: its memory cannot be restored ({}); resuming on its files",
                                 k->id(), util::log_safe(e.what()));
                    from = "files";
                }
            }
            if (from == "files") {
                launcher_.remove(k->id(), {.keep_workspace = true});
                info = launcher_.launch(spec);
            }
        } catch (const std::exception& e) {
            const std::string why = e.what();
            return asio::post(ioc_, [this, k, why] {
                finish_resume(k, failure{failure_kind::start_failed, "The session could not be resumed: " + why});
            });
        }
        ++metrics_.sandbox_starts;
        if (!is_registered(k)) {
            try {
                launcher_.remove(k->id());
            } catch (const std::exception& e) {
                spdlog::error("kernel {}: removing its sandbox failed: {}", k->id(), e.what());
            }
            return finish_resume(k, failure{failure_kind::no_such_kernel, "The kernel was shut down"});
        }
        // Its model says so from here: the queued cells may well be answered
        // before the readiness check below has seen the kernel ready.
        auto p = k->pause_info();
        p.mode.clear();
        p.resumed_from = from;
        p.failed.clear();
        k->set_pause_info(p);
        if (store_) store_->set_paused(k->id(), "", {}, 0);
        bring_up(k, std::move(info), [this, k, from, t0](bool ok) {
            spdlog::info("kernel {}: resumed from its {} in {} ms", k->id(), from == "memory" ? "memory image" : "files",
                         std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count());
            finish_resume(k,
                          ok ? std::nullopt
                             : std::optional<failure>(failure{failure_kind::start_failed,
                                                              "The session could not be resumed: its kernel did not "
                                                              "answer after the resume"}));
        });
    });
}

void kernel_manager::finish_resume(const kernel_ptr& k, std::optional<failure> f) {
    std::vector<done> waiters, pauses;
    {
        std::lock_guard lock(mutex_);
        if (auto it = kernels_.find(k->id()); it != kernels_.end()) {
            it->second.busy_lifecycle = false;
            it->second.resuming = false;
            it->second.died_while_busy.reset();
            waiters = std::exchange(it->second.resume_waiters, {});
            pauses = std::exchange(it->second.pause_after_resume, {});
        }
    }
    // On success the model already says so (resume(), before bring_up).
    if (f && f->kind != failure_kind::no_such_kernel) {
        // The kernel is lost (its image would not restore); its files are
        // kept, and a restart starts a new kernel on them.
        auto p = k->pause_info();
        p.mode.clear();
        p.failed = f->message;
        spdlog::error("kernel {}: {}", k->id(), util::log_safe(f->message));
        ++metrics_.kernel_deaths;
        k->set_pause_info(p);
        k->set_state(kernel_state::dead);
        k->broadcast_status("dead", f->message);
        if (store_) store_->set_paused(k->id(), "", {}, 0);
    } else if (!f) {
        ++metrics_.kernel_resumes;
    }
    for (auto& w : waiters) w(f);
    if (pauses.empty()) return;
    if (f) {
        for (auto& p : pauses) p(f);
        return;
    }
    auto all = std::make_shared<std::vector<done>>(std::move(pauses));
    pause(k, [all](std::optional<failure> pf) {
        for (auto& p : *all) p(pf);
    });
}

void kernel_manager::adopt_paused(const persisted_kernel& row) {
    auto k = std::make_shared<kernel>(row.id, row.spec_name, row.tenant, reactor_, config_.kernel, metrics_);
    k->set_policy(row.policy);
    k->restore_times(row.created, row.last_activity);
    kernel::pause_state p;
    p.mode = row.paused;
    p.since = row.paused_since;
    p.image_bytes = row.paused_image_bytes;
    p.pauses = 1;
    k->set_pause_info(p);
    k->set_state(kernel_state::paused);
    wake_on_demand(k);
    std::lock_guard lock(mutex_);
    admission_.readmit(row.tenant);
    reclaim_volumes_locked(row.id, row.policy.volumes);
    kernels_.insert_or_assign(row.id, record(k, new_budget(), row.env, row.last_activity));
    spdlog::info("kernel {}: taken back paused ({} kept)", row.id, row.paused == "memory" ? "memory and files" : "files");
}

}  // namespace cellgate::kernels
