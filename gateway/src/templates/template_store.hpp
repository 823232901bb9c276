#pragma once

// Each tenant's templates (definition.hpp), their builds and their layers.
//
// A build runs on the build pool (a few threads, fair between tenants):
// each RUN step whose layer is not in the image store yet runs once in a
// build sandbox (sandbox_launcher::run_build_step: a session's confinement,
// writable root, the build's time limit), reaching the network only through
// the egress proxy with the operator's build allow-list. When every step is
// done the template is a kernelspec of its tenant's (kernelspecs.hpp), so
// every door starts sessions from it. Templates are kept as JSON files in
// <state dir>/templates/ and come back after a restart; builds and their
// logs are kept in memory, the last few per tenant.

#include "cellgate/launcher/launcher_config.hpp"
#include "cellgate/launcher/sandbox_launcher.hpp"
#include "egress/policy.hpp"
#include "egress/proxy.hpp"
#include "kernels/kernelspecs.hpp"
#include "metrics/metrics.hpp"
#include "templates/definition.hpp"
#include "templates/template_files.hpp"
#include "util/file_io_pool.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cellgate::templates {

struct store_options {
    std::filesystem::path state_dir;          // templates/ is made here
    std::size_t max_templates_per_tenant = 32;
    std::size_t max_pool_per_tenant = 4;      // warm sandboxes of all its templates together
    std::uint64_t max_layer_bytes_per_tenant = 16ull << 30;
    std::size_t max_builds_per_tenant = 1;    // running at once; 4 more may wait
    std::size_t build_threads = 2;            // builds at once, in all
    std::chrono::seconds step_timeout{900};   // per RUN step
    std::uint64_t step_disk_bytes = 8ull << 30;  // what one RUN step may write (and the tenant's room left)
    launcher::sandbox_limits step_limits{.memory_bytes = 4ull << 30, .pids = 4096, .cpu_millis = 2000};
    // Where a build's steps may connect (egress/policy.hpp entries), through
    // the proxy; empty: nowhere (steps that fetch packages fail).
    std::vector<std::string> build_allow;
    // The registries a template may name an image of ("[http://|https://]host[:port]";
    // http: plain HTTP, else TLS verified); empty: none.
    std::vector<std::string> registries;
    // sources.list lines the steps' apt uses in place of the base's (empty: the base's own).
    std::vector<std::string> apt_sources;
    build_settings build;
    // The proxy and the CA its TLS is signed with (null: no build has a network).
    egress::proxy* proxy = nullptr;
    std::string ca_pem;
};

// A build as GET …/builds/{id} shows it.
struct build_record {
    std::string id, tenant, name, tag;
    std::string status = "queued";  // queued, building, ready, error
    struct step_state {
        std::size_t index = 0;
        std::string type, summary;
        std::string status = "pending";  // pending, cached, running, done, failed, skipped
        double ms = 0;
        std::optional<int> exit_code;
    };
    std::vector<step_state> steps;
    std::deque<std::string> logs;  // lines, the first dropped past the bound (logs_dropped counts them)
    std::size_t log_bytes = 0, logs_dropped = 0;
    std::optional<nlohmann::json> failure;  // {step: {index, type}, exit_code, message, log_tail}
    std::int64_t created_ms = 0, finished_ms = 0;
    std::size_t cached_steps = 0, built_steps = 0;
    std::vector<std::string> made;  // layers this build made (removed if it fails)
    // Streams following it (SSE): each is told every event, and dropped
    // once it answers false or the build ends. At most 8.
    std::vector<std::function<bool(const nlohmann::json& event)>> watchers;
};

class template_store {
public:
    template_store(launcher::sandbox_launcher& launcher, const launcher::launcher_config& launcher_config,
                   kernels::kernelspec_registry& specs, store_options options);
    ~template_store();  // stop()
    // Lets running builds finish, refuses new ones; idempotent.
    void stop();
    // Starts the warm pools of the templates load() found (once set_pool is
    // set), and offers their runtimes (once set_runtimes is).
    void start_pools();
    template_store(const template_store&) = delete;
    template_store& operator=(const template_store&) = delete;

    // The proxy a build's steps reach out through, and its CA (null: none).
    void set_egress(egress::proxy* proxy, std::string ca_pem) {
        std::lock_guard lock(mutex_);
        options_.proxy = proxy;
        options_.ca_pem = std::move(ca_pem);
    }

    // Starts a build of `d` for `tenant`; returns its id. api_exception:
    // 404 (its base template is not the tenant's), 429 (too many templates
    // or builds), 413 (the tenant's layers are at their cap).
    // `also_tags` name the same build as well once it is ready (as tag() does).
    std::string build(const std::string& tenant, const definition& d, const std::vector<std::string>& also_tags = {});
    // Points `tags` of the tenant's template `name` at what its tag `from`
    // is (the same build, image and layers), as a Docker tag does; a tag
    // that named another build is moved (its layers go as a rebuild's do).
    // 404 when `from` is not the tenant's, 429 past the template or pool cap.
    // Returns {"build_id", "tags"}.
    nlohmann::json tag(const std::string& tenant, const std::string& name, const std::string& from,
                       const std::vector<std::string>& tags);
    // The tags of the tenant's template `name`: [{"tag", "build_id", "created_at_ms"}]; [] when none.
    nlohmann::json tags(const std::string& tenant, const std::string& name) const;

    // The tenant's templates (their models), one, or 404; deletes (404 when none).
    nlohmann::json list(const std::string& tenant) const;
    std::optional<nlohmann::json> get(const std::string& tenant, const std::string& name,
                                      const std::optional<std::string>& tag) const;
    void remove(const std::string& tenant, const std::string& name, const std::optional<std::string>& tag);
    // A build of the tenant's: its model with the log lines from `logs_after` on.
    std::optional<nlohmann::json> build_model(const std::string& tenant, const std::string& build_id,
                                              std::size_t logs_after) const;
    // Follows a build of the tenant's: `event` gets {"log": line, "index": n}
    // for each line from `logs_after` on, then {"status", …, "failure"?}
    // when it ends (at once for an ended build). False: no such build; 429
    // when 8 streams follow it already.
    bool watch(const std::string& tenant, const std::string& build_id, std::size_t logs_after,
               std::function<bool(const nlohmann::json& event)> event);
    // The archives its COPY steps unpack (template_files.hpp).
    file_store& files() { return files_; }
    // The operator's package indexes a definition's `packages` expand with.
    const build_settings& settings() const { return options_.build; }
    // What `tenant`'s uploaded archives may hold in all: its template
    // storage cap less what its layers hold.
    std::uint64_t files_room(const std::string& tenant) const;

    // The kernelspec a session of `tenant` starts from for "name[:tag]"; nullopt when it is not a ready template of its.
    std::optional<std::string> kernelspec_for(const std::string& tenant, const std::string& reference) const;

    void render_metrics(std::string& out) const;
    // Removes the layers of deleted or replaced templates that nothing runs
    // on any more (a session's end calls it; blocking: not on an io thread).
    void reclaim();

    // The kernelspecs live sessions run on (set before builds start): a
    // layer a deleted or rebuilt template leaves stays until none of them
    // is that template's.
    std::function<std::set<std::string>()> kernelspecs_in_use;
    // Keeps `size` warm sandboxes of a kernelspec (0: none); set before builds start.
    std::function<void(const std::string& kernelspec, std::size_t size)> set_pool;
    // Offers a template's one-shot runtimes (its definition's `runtimes`,
    // checked) to its tenant, in place of what that kernelspec offered
    // before; an empty list takes them away. Set before builds start.
    std::function<void(const std::string& kernelspec, const std::string& tenant, const nlohmann::json& runtimes)>
        set_runtimes;

private:
    struct template_record {
        std::string tenant, name, tag, kernelspec, image, build_id;
        std::string workdir = "/";  // after its WORKDIR steps: where its start command runs
        std::string user = "root";  // after its USER steps: a template built on it starts from both
        definition def;
        std::map<std::string, std::string> env;
        std::vector<std::string> layers;
        std::int64_t created_ms = 0;
        nlohmann::json model() const;
    };
    void run(const std::shared_ptr<build_record>& b, definition d, std::string nonce, std::vector<std::string> also_tags);
    // Keeps `t` (on disk, as a kernelspec, in templates_), in place of the
    // tenant's template of its name and tag if there is one; its pool starts.
    void install_locked(const template_record& t);
    // 429 when the tenant's templates, with `kernelspecs` (new or replaced)
    // each keeping `pool` warm sandboxes, would pass its caps.
    void check_caps_locked(const std::string& tenant, const std::set<std::string>& kernelspecs, std::size_t pool) const;
    void log(build_record& b, const std::string& text);
    void finish(build_record& b, std::string status, std::optional<nlohmann::json> failure);
    void register_kernelspec(const template_record& t);
    void persist(const template_record& t) const;
    void load();
    std::uint64_t tenant_bytes_locked(const std::string& tenant) const;  // layers and uploaded archives
    // The registry entry `reference` is in (its TLS setting), or nullopt when the operator allows none of it.
    std::optional<bool> registry_tls(const std::string& reference) const;
    std::uint64_t layer_bytes_locked(const std::string& tenant) const;
    std::uint64_t layer_bytes(const std::string& id) const;
    bool layer_exists(const std::string& id) const;
    std::filesystem::path record_path(const std::string& tenant, const std::string& name, const std::string& tag) const;
    void reclaim_layers_locked();

    launcher::sandbox_launcher& launcher_;
    const launcher::launcher_config& launcher_config_;
    kernels::kernelspec_registry& specs_;
    store_options options_;
    egress::policy build_policy_;

    mutable std::mutex mutex_;
    std::map<std::string, template_record> templates_;  // by kernelspec name
    std::map<std::string, std::shared_ptr<build_record>> builds_;  // by id
    std::map<std::string, std::deque<std::string>> recent_builds_;  // per tenant, oldest first (kept: 16)
    std::set<std::string> building_;  // tenant + "/" + name + ":" + tag
    std::set<std::string> doomed_layers_;  // tenant/layer: a deleted or replaced template's, removed once unused
    std::map<std::string, std::set<std::string>> retired_;
    std::vector<std::pair<std::string, std::size_t>> pools_to_start_;  // load()'s, for start_pools()  // kernelspec → layers its earlier versions ran on
    std::uint64_t builds_ready_ = 0, builds_failed_ = 0, steps_built_ = 0, steps_cached_ = 0;
    mutable file_store files_;
    util::file_io_pool pool_;
};

}  // namespace cellgate::templates
