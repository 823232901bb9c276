#include "templates/template_store.hpp"

#include "cellgate/launcher/launch_error.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

namespace cellgate::templates {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t max_log_bytes = 4u << 20;
constexpr std::size_t max_log_lines = 50000;
constexpr std::size_t kept_builds_per_tenant = 16;
constexpr std::size_t max_build_log_line = 4096;

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string random_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    std::ostringstream s;
    s << std::hex << rng() << rng();
    auto out = s.str();
    out.resize(24, '0');
    return out;
}

// What a RUN step runs: the egress forwarder first when the build has a
// network (as a session's kernel starts it), then the command in its
// working directory (made if missing, as Docker's WORKDIR does).
// A registry image's WorkingDir as a template's first WORKDIR: absolute and
// plain, else "/".
std::string image_workdir(const std::string& dir) {
    if (dir.empty() || dir[0] != '/' || dir.size() > 4096 || dir.find_first_of("\n\r") != std::string::npos) return "/";
    auto out = fs::path(dir).lexically_normal().string();
    if (out.size() > 1 && out.back() == '/') out.pop_back();
    return out;
}

// A registry image's User ("name", "uid", "name:group", "uid:gid") as a
// template's first USER: root, user (uid 1000) or a uid below 65536; a name
// is looked up in the image's own /etc/passwd. "root" when it names nothing.
std::string image_user(const std::string& user, const fs::path& root) {
    const auto name = user.substr(0, user.find(':'));
    if (name.empty() || name == "root" || name == "0") return "root";
    if (name.size() <= 5 && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::stoul(name) < 65536 ? (name == "1000" ? "user" : name) : "root";
    std::ifstream passwd(root / "etc/passwd");
    std::string line;
    for (int n = 0; n < 10000 && std::getline(passwd, line); ++n) {
        const auto a = line.find(':'), b = line.find(':', a + 1), c = line.find(':', b + 1);
        if (a == std::string::npos || c == std::string::npos || line.substr(0, a) != name) continue;
        const auto uid = line.substr(b + 1, c - b - 1);
        if (!uid.empty() && uid.size() <= 5 && std::all_of(uid.begin(), uid.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
            return std::stoul(uid) == 0 ? "root" : std::stoul(uid) == 1000 ? "user" : std::stoul(uid) < 65536 ? uid : "root";
    }
    return "root";
}

std::vector<std::string> step_argv(const std::string& command, const std::string& workdir, bool network) {
    std::string script;
    if (network)
        script +=
            "if [ -S /run/egress/proxy.sock ] && [ -x /usr/bin/python3 ] && [ -f /opt/cellgate/cellgate-egress ]; then\n"
            "  /usr/bin/python3 -I -S /opt/cellgate/cellgate-egress </dev/null >/dev/null 2>&1 &\n"
            "  /usr/bin/python3 -I -S -c 'import socket, time\n"
            "for _ in range(200):\n"
            "    try:\n"
            "        socket.create_connection((\"127.0.0.1\", 3128), 0.2).close(); break\n"
            "    except OSError: time.sleep(0.025)'\n"
            "fi\n";
    script += "mkdir -p " + shell_quote(workdir) + " 2>/dev/null; cd " + shell_quote(workdir) + " || exit 1\n" + command + "\n";
    return {"/bin/sh", "-c", script};
}

std::string tail_of(const std::string& s, std::size_t bytes) { return s.size() <= bytes ? s : s.substr(s.size() - bytes); }

}  // namespace

json template_store::template_record::model() const {
    return {{"name", name},
            {"tag", tag},
            {"reference", name + ":" + tag},
            {"kernelspec", kernelspec},
            {"image", image},
            {"build_id", build_id},
            {"created_at_ms", created_ms},
            {"layers", layers.size()},
            {"env", env},
            {"definition", to_json(def)}};
}

template_store::template_store(launcher::sandbox_launcher& launcher, const launcher::launcher_config& launcher_config,
                               kernels::kernelspec_registry& specs, store_options options)
    : launcher_(launcher),
      launcher_config_(launcher_config),
      specs_(specs),
      options_(std::move(options)),
      build_policy_(egress::policy::parse(options_.build_allow, {})),
      files_(options_.state_dir / "template-files"),
      pool_(util::file_io_pool::options{.threads = std::max<std::size_t>(1, options_.build_threads),
                                        .per_tenant_running = std::max<std::size_t>(1, options_.max_builds_per_tenant),
                                        .per_tenant_queued = 4,
                                        .max_queued = 64}) {
    load();
}

template_store::~template_store() { stop(); }

void template_store::start_pools() {
    std::lock_guard lock(mutex_);
    if (set_pool)
        for (const auto& [spec, size] : pools_to_start_) set_pool(spec, size);
    pools_to_start_.clear();
    if (set_runtimes)
        for (const auto& [spec, t] : templates_)
            if (!t.def.runtimes.empty()) set_runtimes(spec, t.tenant, t.def.runtimes);
}

void template_store::stop() {
    pool_.stop();
    std::lock_guard lock(mutex_);
    kernelspecs_in_use = nullptr;
}

fs::path template_store::record_path(const std::string& tenant, const std::string& name, const std::string& tag) const {
    return options_.state_dir / "templates" / sha256_hex(tenant).substr(0, 16) / (name + "@" + tag + ".json");
}

bool template_store::layer_exists(const std::string& id) const {
    std::error_code ec;
    return fs::exists(launcher_config_.image_store / ".layers" / id / ".complete", ec);
}

std::uint64_t template_store::layer_bytes(const std::string& id) const {
    std::ifstream in(launcher_config_.image_store / ".layers" / id / "bytes");
    std::uint64_t n = 0;
    in >> n;
    return n;
}

std::uint64_t template_store::tenant_bytes_locked(const std::string& tenant) const {
    return layer_bytes_locked(tenant) + files_.bytes(tenant);
}

std::optional<bool> template_store::registry_tls(const std::string& reference) const {
    const auto host = reference.substr(0, reference.find('/'));
    for (const auto& entry : options_.registries) {
        const bool plain = entry.starts_with("http://");
        auto h = entry.substr(entry.find("://") == std::string::npos ? 0 : entry.find("://") + 3);
        while (!h.empty() && h.back() == '/') h.pop_back();
        if (h == host) return !plain;
    }
    return std::nullopt;
}

std::uint64_t template_store::files_room(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    const auto layers = layer_bytes_locked(tenant);
    return layers >= options_.max_layer_bytes_per_tenant ? 0 : options_.max_layer_bytes_per_tenant - layers;
}

std::uint64_t template_store::layer_bytes_locked(const std::string& tenant) const {
    std::set<std::string> layers;
    for (const auto& [_, t] : templates_)
        if (t.tenant == tenant) layers.insert(t.layers.begin(), t.layers.end());
    for (const auto& id : doomed_layers_)
        if (id.starts_with(tenant + "/")) layers.insert(id.substr(tenant.size() + 1));
    std::uint64_t total = 0;
    for (const auto& id : layers) total += layer_bytes(id);
    return total;
}

void template_store::check_caps_locked(const std::string& tenant, const std::set<std::string>& kernelspecs,
                                       std::size_t pool) const {
    std::size_t count = 0, others = 0, pooled = kernelspecs.size() * pool;
    for (const auto& [ks, t] : templates_)
        if (t.tenant == tenant) {
            ++count;
            if (kernelspecs.count(ks)) continue;
            ++others;
            pooled += t.def.pool;
        }
    if (others + kernelspecs.size() > std::max(count, options_.max_templates_per_tenant))
        throw api_exception(429, "This tenant has " + std::to_string(count) + " templates, the most it may keep (" +
                                     std::to_string(options_.max_templates_per_tenant) + "); delete one first");
    if (pooled > options_.max_pool_per_tenant)
        throw api_exception(429, "This tenant's templates would keep " + std::to_string(pooled) +
                                     " warm sandboxes, past its " + std::to_string(options_.max_pool_per_tenant) +
                                     "; lower kernel.pool here or on another template");
}

std::string template_store::build(const std::string& tenant, const definition& d, const std::vector<std::string>& also_tags) {
    std::lock_guard lock(mutex_);
    std::set<std::string> names = {d.tag}, kernelspecs;
    names.insert(also_tags.begin(), also_tags.end());
    for (const auto& tag : names) kernelspecs.insert(kernelspec_name(tenant, d.name, tag));
    check_caps_locked(tenant, kernelspecs, d.pool);
    if (d.base.starts_with("template:")) {
        const auto ref = d.base.substr(9);
        const auto colon = ref.rfind(':');
        if (!templates_.count(kernelspec_name(tenant, ref.substr(0, colon), ref.substr(colon + 1))))
            throw api_exception(404, "No template '" + ref + "' of yours to build on (a base is a built-in image, "
                                     "python or debian, or one of your templates; this gateway pulls no images "
                                     "from a registry)");
    }
    if (d.base.starts_with("oci:") && !registry_tls(d.base.substr(4))) {
        std::string allowed;
        for (const auto& r : options_.registries) allowed += (allowed.empty() ? "" : ", ") + r;
        throw api_exception(400, "'" + d.base.substr(4) + "' is not in a registry this gateway pulls from (" +
                                     (allowed.empty() ? std::string("none is configured: --template-registries") : allowed) + ")");
    }
    if (const auto used = tenant_bytes_locked(tenant); used >= options_.max_layer_bytes_per_tenant)
        throw api_exception(413, "This tenant's template layers hold " + std::to_string(used) +
                                     " bytes, at its cap of " + std::to_string(options_.max_layer_bytes_per_tenant) +
                                     "; delete a template first");
    const auto key = tenant + "/" + d.name + ":" + d.tag;
    if (building_.count(key)) throw api_exception(409, "Template '" + d.name + ":" + d.tag + "' is being built already");
    auto b = std::make_shared<build_record>();
    b->id = random_id();
    b->tenant = tenant;
    b->name = d.name;
    b->tag = d.tag;
    b->created_ms = now_ms();
    for (std::size_t i = 0; i < d.steps.size(); ++i) {
        build_record::step_state s;
        s.index = i;
        s.type = d.steps[i].type;
        s.summary = summary_of(d.steps[i]);
        b->steps.push_back(s);
    }
    const auto nonce = random_id();
    const auto accepted = pool_.submit(tenant, [this, b, d, nonce, also = std::vector<std::string>(names.begin(), names.end())] {
        try {
            run(b, d, nonce, also);
        } catch (const std::exception& e) {
            std::lock_guard relock(mutex_);
            log(*b, std::string("cellgate: the build failed: ") + e.what());
            for (const auto& id : b->made) doomed_layers_.insert(b->tenant + "/" + id);
            finish(*b, "error", json{{"message", std::string("the build failed: ") + e.what()}});
            reclaim_layers_locked();
        }
    });
    if (accepted != util::file_io_pool::admission::accepted)
        throw api_exception(429, accepted == util::file_io_pool::admission::tenant_busy
                                     ? "This tenant has as many template builds running and waiting as it may; "
                                       "try again when one is done"
                                     : "The gateway has as many template builds waiting as it takes; try again later");
    building_.insert(key);
    builds_[b->id] = b;
    auto& recent = recent_builds_[tenant];
    recent.push_back(b->id);
    while (recent.size() > kept_builds_per_tenant) {
        const auto old = builds_.find(recent.front());
        if (old != builds_.end() && (old->second->status == "queued" || old->second->status == "building")) break;
        builds_.erase(recent.front());
        recent.pop_front();
    }
    return b->id;
}

void template_store::log(build_record& b, const std::string& text) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.size() > max_build_log_line) line = line.substr(0, max_build_log_line) + "…";
        const auto index = b.logs_dropped + b.logs.size();
        std::erase_if(b.watchers, [&](const auto& w) { return !w(json{{"log", line}, {"index", index}}); });
        b.logs.push_back(line);
        b.log_bytes += line.size();
        while (b.logs.size() > max_log_lines || b.log_bytes > max_log_bytes) {
            b.log_bytes -= b.logs.front().size();
            b.logs.pop_front();
            ++b.logs_dropped;
        }
    }
}

void template_store::finish(build_record& b, std::string status, std::optional<json> failure) {
    b.status = std::move(status);
    b.failure = std::move(failure);
    b.finished_ms = now_ms();
    building_.erase(b.tenant + "/" + b.name + ":" + b.tag);
    ++(b.status == "ready" ? builds_ready_ : builds_failed_);
    json end = {{"status", b.status}, {"build_id", b.id}, {"template", b.name + ":" + b.tag}};
    if (b.failure) end["failure"] = *b.failure;
    for (const auto& w : b.watchers) w(end);
    b.watchers.clear();
}

bool template_store::watch(const std::string& tenant, const std::string& build_id, std::size_t logs_after,
                           std::function<bool(const json& event)> event) {
    std::lock_guard lock(mutex_);
    const auto it = builds_.find(build_id);
    if (it == builds_.end() || it->second->tenant != tenant) return false;
    auto& b = *it->second;
    if (b.watchers.size() >= 8) throw api_exception(429, "8 streams follow this build already");
    for (std::size_t n = std::max(logs_after, b.logs_dropped); n < b.logs_dropped + b.logs.size(); ++n)
        if (!event(json{{"log", b.logs[n - b.logs_dropped]}, {"index", n}})) return true;
    if (b.status == "ready" || b.status == "error") {
        json end = {{"status", b.status}, {"build_id", b.id}, {"template", b.name + ":" + b.tag}};
        if (b.failure) end["failure"] = *b.failure;
        event(end);
        return true;
    }
    b.watchers.push_back(std::move(event));
    return true;
}

void template_store::run(const std::shared_ptr<build_record>& bp, definition d, std::string nonce,
                         std::vector<std::string> also_tags) {
    auto& b = *bp;
    std::string base_image = d.base, base_identity;
    std::map<std::string, std::string> base_env;
    std::string base_workdir = "/", base_user = "root";
    std::vector<std::string> inherited;
    {
        std::lock_guard lock(mutex_);
        b.status = "building";
        if (d.base.starts_with("template:")) {
            const auto ref = d.base.substr(9);
            const auto colon = ref.rfind(':');
            const auto it = templates_.find(kernelspec_name(b.tenant, ref.substr(0, colon), ref.substr(colon + 1)));
            if (it == templates_.end()) {
                log(b, "cellgate: the base template '" + ref + "' is gone");
                return finish(b, "error", json{{"message", "the base template '" + ref + "' is gone"}});
            }
            base_image = it->second.image;
            base_identity = "template " + it->second.image;
            base_env = it->second.env;
            base_workdir = it->second.workdir;
            base_user = it->second.user;
            inherited = it->second.layers;
        }
    }
    if (d.base.starts_with("oci:")) {
        // A registry image: pulled once per tenant and reference into a base layer.
        const auto ref = d.base.substr(4);
        const auto tls = registry_tls(ref);
        const auto id = sha256_hex("cellgate oci base 1\n" + b.tenant + "\n" + ref + (d.force ? "\n" + nonce : "")).substr(0, 48);
        if (!tls) {
            std::lock_guard lock(mutex_);
            log(b, "cellgate: '" + ref + "' is no longer in a registry this gateway pulls from");
            return finish(b, "error", json{{"message", "'" + ref + "' is not in a registry this gateway pulls from"}});
        }
        if (!layer_exists(id)) {
            {
                std::lock_guard lock(mutex_);
                log(b, "Pulling " + ref);
            }
            try {
                const auto r = launcher_.import_image(launcher::image_import_spec{
                    .layer = id, .reference = ref, .tls_verify = *tls, .disk_bytes = options_.step_disk_bytes,
                    .timeout = options_.step_timeout});
                std::lock_guard lock(mutex_);
                log(b, " ---> " + r.digest + " (" + std::to_string(r.layer_bytes) + " bytes, " +
                           std::to_string(static_cast<long long>(r.ms)) + " ms)");
                if (r.python_added)
                    log(b, " ---> the image has no Python that runs ipykernel: cellgate's (Debian's Python 3 with "
                           "ipykernel) is added at /opt/cellgate/runtime");
                b.made.push_back(id);
                if (tenant_bytes_locked(b.tenant) + r.layer_bytes > options_.max_layer_bytes_per_tenant) {
                    const auto why = "the image's root (" + std::to_string(r.layer_bytes) + " bytes) would take the "
                                     "tenant's template layers past its cap of " +
                                     std::to_string(options_.max_layer_bytes_per_tenant) + " bytes";
                    log(b, "cellgate: " + why);
                    doomed_layers_.insert(b.tenant + "/" + id);
                    finish(b, "error", json{{"message", why}});
                    return reclaim_layers_locked();
                }
            } catch (const launcher::launch_error& e) {
                if (e.error_number() != EEXIST) {
                    std::lock_guard lock(mutex_);
                    const auto why = std::string("pulling ") + ref + " failed: " + e.what();
                    log(b, "cellgate: " + why);
                    return finish(b, "error", json{{"message", why}});
                }
            }
        } else {
            std::lock_guard lock(mutex_);
            log(b, "Pulling " + ref + "\n ---> cached (layer " + id.substr(0, 12) + ")");
        }
        std::ifstream in(launcher_config_.image_store / ".layers" / id / "config.json");
        const auto config = json::parse(in, nullptr, false);
        if (config.is_object()) {
            base_env = config.value("env", std::map<std::string, std::string>{});
            base_workdir = image_workdir(config.value("workdir", ""));
            base_user = image_user(config.value("user", ""), launcher_config_.image_store / ".layers" / id / "diff");
            if (base_workdir != "/" || base_user != "root") {
                std::lock_guard lock(mutex_);
                log(b, " ---> the image's WORKDIR " + base_workdir + ", USER " + base_user);
            }
        }
        base_image = launcher::layer_image(id);
        base_identity = "oci " + id + " " + (config.is_object() ? config.value("digest", "") : "");
        inherited = {id};
    }
    if (base_identity.empty()) {
        std::error_code ec;
        const auto rootfs = fs::canonical(launcher_config_.image_store / d.base / "current" / "rootfs", ec);
        if (ec) {
            std::lock_guard lock(mutex_);
            log(b, "cellgate: no built-in image '" + d.base + "' on this gateway");
            return finish(b, "error", json{{"message", "no built-in image '" + d.base + "' on this gateway"}});
        }
        base_identity = "image " + rootfs.string();
    }
    // What each COPY step unpacks: the tenant's archive, by its own digest.
    std::map<std::size_t, file_archive> archives;
    for (std::size_t i = 0; i < d.steps.size(); ++i) {
        auto& s = d.steps[i];
        if (s.type != "COPY") continue;
        const auto found = files_.find(b.tenant, s.files);
        if (!found) {
            std::lock_guard lock(mutex_);
            const auto why = "step " + std::to_string(i + 1) + " (COPY " + s.args[0] + "): no files were uploaded as '" +
                             s.files + "' (or they were dropped to make room); upload them again";
            log(b, "cellgate: " + why);
            b.steps[i].status = "failed";
            return finish(b, "error", json{{"step", {{"index", i}, {"type", s.type}}}, {"message", why}});
        }
        s.digest = found->digest;
        archives[i] = *found;
    }
    const auto p = make_plan(d, b.tenant, base_image, base_identity, base_env, nonce, base_workdir, base_user);
    if (!p.copies.empty() && launcher_config_.egress_root.empty()) {
        std::lock_guard lock(mutex_);
        const auto why = std::string("COPY steps need the gateway's egress root (egress is off here)");
        log(b, "cellgate: " + why);
        return finish(b, "error", json{{"message", why}});
    }

    // The build's way out: the proxy, with the operator's build allow-list.
    const bool network = options_.proxy != nullptr && !options_.build_allow.empty() &&
                         !launcher_config_.egress_root.empty();
    const std::string egress_session = "build-" + b.id;
    const fs::path egress_dir = launcher_config_.egress_root / ("b-" + b.id);
    // The build's side directory (/run/egress in its steps): the proxy's
    // socket and CA when it has a network, the archives its COPY steps unpack.
    struct side_dir {
        egress::proxy* proxy;
        std::string session;
        fs::path dir;
        bool made = false;
        ~side_dir() {
            if (proxy) proxy->detach(session);
            std::error_code ec;
            if (made) fs::remove_all(dir, ec);
        }
    } guard{nullptr, egress_session, egress_dir};
    const bool apt_sources = network && !options_.apt_sources.empty();
    if (network || !p.copies.empty()) {
        std::error_code ec;
        fs::create_directories(egress_dir, ec);
        fs::permissions(egress_dir, fs::perms(0755), ec);
        guard.made = true;
    }
    if (apt_sources) {
        // The operator's mirror in place of the base's sources (APT_CONFIG, below).
        std::string lines;
        for (const auto& l : options_.apt_sources) lines += l + "\n";
        std::ofstream(egress_dir / "sources.list") << lines;
        std::ofstream(egress_dir / "apt.conf") << "Dir::Etc::SourceList \"/run/egress/sources.list\";\n"
                                                   "Dir::Etc::SourceParts \"/run/egress/sources.list.d\";\n";
    }
    // A plain `pip install` in a RUN step (E2B's pipInstall) installs into the
    // image, as it would in a container image: Debian's Python refuses that
    // by default (PEP 668) unless told.
    std::map<std::string, std::string> network_env = {{"PIP_BREAK_SYSTEM_PACKAGES", "1"},
                                                      {"PIP_ROOT_USER_ACTION", "ignore"},
                                                      {"PIP_DISABLE_PIP_VERSION_CHECK", "1"}};
    if (const auto& url = options_.build.pip_index_url; network && !url.empty()) {
        network_env["PIP_INDEX_URL"] = url;
        if (const auto host = pip_trusted_host(url); !host.empty()) network_env["PIP_TRUSTED_HOST"] = host;
    }
    if (const auto& url = options_.build.npm_registry_url; network && !url.empty()) network_env["NPM_CONFIG_REGISTRY"] = url;
    if (apt_sources) network_env["APT_CONFIG"] = "/run/egress/apt.conf";
    if (network) {
        options_.proxy->attach(egress_session, egress_dir / "proxy.sock",
                               egress::session_rules{b.tenant, {build_policy_}, {}});
        guard.proxy = options_.proxy;
        for (const char* n : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) network_env[n] = "http://127.0.0.1:3128";
        network_env["NO_PROXY"] = network_env["no_proxy"] = "localhost,127.0.0.1";
        if (!options_.ca_pem.empty()) {
            std::string bundle;
            std::ifstream system("/etc/ssl/certs/ca-certificates.crt");
            bundle.assign(std::istreambuf_iterator<char>(system), {});
            bundle += "\n" + options_.ca_pem;
            std::ofstream(egress_dir / "ca.pem") << options_.ca_pem;
            std::ofstream(egress_dir / "ca-bundle.pem") << bundle;
            for (const char* n : {"PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"})
                network_env[n] = "/run/egress/ca-bundle.pem";
            network_env["NODE_EXTRA_CA_CERTS"] = "/run/egress/ca.pem";
        }
    }

    auto& made = b.made;
    const auto total = p.steps.size();
    for (const auto& step : p.steps) {
        const auto i = step.index;
        const auto head = "Step " + std::to_string(i + 1) + "/" + std::to_string(total) + ": " + step.summary;
        if (!step.makes_layer) {
            std::lock_guard lock(mutex_);
            log(b, head);
            b.steps[i].status = "done";
            continue;
        }
        std::uint64_t disk = options_.step_disk_bytes;
        if (layer_exists(step.spec.layer)) {
            std::lock_guard lock(mutex_);
            log(b, head + "\n ---> cached (layer " + step.spec.layer.substr(0, 12) + ")");
            b.steps[i].status = "cached";
            ++b.cached_steps;
            ++steps_cached_;
            continue;
        }
        {
            std::lock_guard lock(mutex_);
            std::uint64_t used = tenant_bytes_locked(b.tenant);
            for (const auto& id : made) used += layer_bytes(id);
            if (used >= options_.max_layer_bytes_per_tenant) {
                const auto why = "the tenant's template layers would pass its cap of " +
                                 std::to_string(options_.max_layer_bytes_per_tenant) + " bytes";
                log(b, head + "\ncellgate: " + why);
                b.steps[i].status = "failed";
                for (const auto& id : made) doomed_layers_.insert(b.tenant + "/" + id);
                finish(b, "error", json{{"step", {{"index", i}, {"type", step.type}}}, {"message", why}});
                return reclaim_layers_locked();
            }
            log(b, head);
            b.steps[i].status = "running";
            // What the step may write: the tenant's room left, at most the step's own cap.
            disk = std::clamp<std::uint64_t>(options_.max_layer_bytes_per_tenant - used, 64ull << 20,
                                             options_.step_disk_bytes);
        }
        auto spec = step.spec;
        spec.disk_bytes = disk;
        spec.argv = step_argv(step.spec.argv.back(), step.spec.cwd, network);
        spec.cwd = "/";
        for (const auto& [k, v] : network_env) spec.env.emplace(k, v);
        if (const auto a = archives.find(i); a != archives.end()) {
            // The archive, where the step finds it (a link: the shelf may drop its name meanwhile).
            const auto at = egress_dir / fs::path(copy_archive_path(i)).filename();
            std::error_code ec;
            fs::remove(at, ec);
            fs::create_hard_link(a->second.path, at, ec);
            if (ec) fs::copy_file(a->second.path, at, ec);
            fs::permissions(at, fs::perms(0644), ec);
            if (ec) throw std::runtime_error("cannot hand step " + std::to_string(i + 1) + " its files: " + ec.message());
        }
        if (guard.made) spec.egress_dir = egress_dir.string();
        spec.limits = options_.step_limits;
        if (d.memory_bytes) spec.limits.memory_bytes = std::max(spec.limits.memory_bytes, *d.memory_bytes);
        spec.limits.memory_bytes = std::min(spec.limits.memory_bytes, launcher_config_.max_limits.memory_bytes);
        spec.timeout = options_.step_timeout;
        launcher::build_step_result r;
        try {
            r = launcher_.run_build_step(spec);
        } catch (const launcher::launch_error& e) {
            if (e.error_number() == EEXIST) {  // another build made the same layer meanwhile
                std::lock_guard lock(mutex_);
                log(b, " ---> cached (layer " + step.spec.layer.substr(0, 12) + ")");
                b.steps[i].status = "cached";
                ++b.cached_steps;
                continue;
            }
            throw;
        }
        std::lock_guard lock(mutex_);
        log(b, r.output);
        b.steps[i].ms = r.ms;
        b.steps[i].exit_code = r.exit_code;
        if (r.exit_code != 0) {
            b.steps[i].status = "failed";
            const auto why = r.timed_out ? "step " + std::to_string(i + 1) + " (" + step.summary + ") ran past its " +
                                               std::to_string(options_.step_timeout.count()) + " s limit and was stopped"
                                         : "step " + std::to_string(i + 1) + " (" + step.summary + ") exited with code " +
                                               std::to_string(r.exit_code);
            log(b, "cellgate: " + why);
            for (const auto& id : made) doomed_layers_.insert(b.tenant + "/" + id);
            finish(b, "error", json{{"step", {{"index", i}, {"type", step.type}}},
                                    {"exit_code", r.exit_code},
                                    {"timed_out", r.timed_out},
                                    {"message", why},
                                    {"log_tail", tail_of(r.output, 4096)}});
            return reclaim_layers_locked();
        }
        log(b, " ---> layer " + step.spec.layer.substr(0, 12) + " (" + std::to_string(r.layer_bytes) + " bytes, " +
                   std::to_string(static_cast<long long>(r.ms)) + " ms)");
        b.steps[i].status = "done";
        ++b.built_steps;
        ++steps_built_;
        made.push_back(step.spec.layer);
    }

    template_record t;
    t.tenant = b.tenant;
    t.name = d.name;
    t.tag = d.tag;
    t.kernelspec = kernelspec_name(b.tenant, d.name, d.tag);
    t.image = p.image;
    t.build_id = b.id;
    t.def = d;
    t.env = p.env;
    t.workdir = p.workdir;
    t.user = p.user;
    t.layers = inherited;
    t.layers.insert(t.layers.end(), p.layers.begin(), p.layers.end());
    t.created_ms = now_ms();
    std::lock_guard lock(mutex_);
    install_locked(t);
    std::string tagged = d.tag;
    for (const auto& tag : also_tags) {
        if (tag == d.tag) continue;
        auto also = t;
        also.tag = also.def.tag = tag;
        also.kernelspec = kernelspec_name(b.tenant, d.name, tag);
        install_locked(also);
        tagged += ", " + tag;
    }
    log(b, "cellgate: template " + d.name + ":" + tagged + " is ready (" + std::to_string(b.built_steps) + " built, " +
               std::to_string(b.cached_steps) + " cached)");
    finish(b, "ready", std::nullopt);
    reclaim_layers_locked();
}

void template_store::install_locked(const template_record& t) {
    persist(t);
    register_kernelspec(t);
    const auto old = templates_.find(t.kernelspec);
    const bool replaced = old != templates_.end();
    if (replaced) {
        const std::set<std::string> kept(t.layers.begin(), t.layers.end());
        for (const auto& id : old->second.layers)
            if (!kept.count(id)) {
                doomed_layers_.insert(t.tenant + "/" + id);
                retired_[t.kernelspec].insert(id);
            }
    }
    templates_[t.kernelspec] = t;
    // Its warm sandboxes start now (a replaced template's old ones are stopped).
    if (set_pool && (t.def.pool > 0 || replaced)) set_pool(t.kernelspec, t.def.pool);
    if (set_runtimes && (!t.def.runtimes.empty() || replaced)) set_runtimes(t.kernelspec, t.tenant, t.def.runtimes);
}

json template_store::tag(const std::string& tenant, const std::string& name, const std::string& from,
                         const std::vector<std::string>& tags) {
    std::lock_guard lock(mutex_);
    const auto it = templates_.find(kernelspec_name(tenant, name, from));
    if (it == templates_.end()) throw api_exception(404, "No template '" + name + ":" + from + "'");
    const auto source = it->second;
    std::set<std::string> kernelspecs = {it->first};
    for (const auto& tag : tags) kernelspecs.insert(kernelspec_name(tenant, name, tag));
    check_caps_locked(tenant, kernelspecs, source.def.pool);
    json out = json::array();
    for (const auto& tag : tags) {
        out.push_back(tag);
        if (tag == from) continue;
        auto t = source;
        t.tag = t.def.tag = tag;
        t.kernelspec = kernelspec_name(tenant, name, tag);
        t.created_ms = now_ms();
        install_locked(t);
    }
    reclaim_layers_locked();
    return {{"build_id", source.build_id}, {"tags", out}};
}

json template_store::tags(const std::string& tenant, const std::string& name) const {
    std::lock_guard lock(mutex_);
    json out = json::array();
    for (const auto& [_, t] : templates_)
        if (t.tenant == tenant && t.name == name)
            out.push_back({{"tag", t.tag}, {"build_id", t.build_id}, {"created_at_ms", t.created_ms}});
    return out;
}

void template_store::register_kernelspec(const template_record& t) {
    const auto* base = specs_.find(specs_.default_name());
    kernels::kernelspec k = base ? *base : kernels::default_python_kernelspec();
    k.name = t.kernelspec;
    k.display_name = t.name + ":" + t.tag;
    k.image = t.image;
    k.owner = t.tenant;
    k.image_env = t.env;
    if (!t.def.preload.empty()) k.preload = t.def.preload;
    if (t.def.start_timeout_s) k.start_timeout = std::chrono::seconds(*t.def.start_timeout_s);
    k.start_cmd = t.def.start_cmd.value_or("");
    k.ready_cmd = t.def.ready_cmd.value_or("");
    if (t.workdir != "/") k.start_dir = t.workdir;
    const auto& max = launcher_config_.max_limits;
    if (t.def.cpu_millis) k.limits.cpu_millis = std::min(*t.def.cpu_millis, max.cpu_millis);
    if (t.def.memory_bytes) k.limits.memory_bytes = std::min(*t.def.memory_bytes, max.memory_bytes);
    if (t.def.workspace_bytes) k.limits.workspace_bytes = std::min(*t.def.workspace_bytes, max.workspace_bytes);
    specs_.add_template(std::move(k));
}

void template_store::persist(const template_record& t) const {
    const auto path = record_path(t.tenant, t.name, t.tag);
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    const json j = {{"tenant", t.tenant}, {"name", t.name},     {"tag", t.tag},       {"kernelspec", t.kernelspec},
                    {"image", t.image},   {"build_id", t.build_id}, {"env", t.env},   {"layers", t.layers}, {"workdir", t.workdir}, {"user", t.user},
                    {"created_ms", t.created_ms}, {"definition", to_json(t.def)}};
    const auto tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << j.dump();
    }
    fs::rename(tmp, path, ec);
    if (ec) spdlog::warn("templates: could not keep {}:{}: {}", t.name, t.tag, ec.message());
}

void template_store::load() {
    std::error_code ec;
    for (const auto& dir : fs::directory_iterator(options_.state_dir / "templates", ec)) {
        for (const auto& f : fs::directory_iterator(dir.path(), ec)) {
            if (f.path().extension() != ".json") continue;
            try {
                std::ifstream in(f.path());
                const auto j = json::parse(in);
                template_record t;
                t.tenant = j.at("tenant");
                t.name = j.at("name");
                t.tag = j.at("tag");
                t.kernelspec = j.at("kernelspec");
                t.image = j.at("image");
                t.build_id = j.value("build_id", "");
                t.env = j.value("env", std::map<std::string, std::string>{});
                t.layers = j.value("layers", std::vector<std::string>{});
                t.workdir = j.value("workdir", std::string("/"));
                t.user = j.value("user", std::string("root"));
                t.created_ms = j.value("created_ms", std::int64_t{0});
                const auto& def = j.at("definition");
                t.def.name = t.name;
                t.def.tag = t.tag;
                t.def.base = def.value("base", "python");
                for (const auto& s : def.value("steps", json::array()))
                    t.def.steps.push_back({.type = s.at("type"), .args = s.at("args"), .force = s.value("force", false), .files = s.value("files", ""), .digest = {}});
                t.def.preload = def.value("preload", std::vector<std::string>{});
                t.def.pool = def.value("pool", 0u);
                if (def.contains("start_timeout_s")) t.def.start_timeout_s = def["start_timeout_s"].get<std::uint32_t>();
                if (def.contains("start_cmd")) t.def.start_cmd = def["start_cmd"].get<std::string>();
                if (def.contains("ready_cmd")) t.def.ready_cmd = def["ready_cmd"].get<std::string>();
                t.def.runtimes = def.value("runtimes", json::array());
                const auto r = def.value("resources", json::object());
                if (r.contains("cpu_millis")) t.def.cpu_millis = r["cpu_millis"].get<std::uint32_t>();
                if (r.contains("memory_bytes")) t.def.memory_bytes = r["memory_bytes"].get<std::uint64_t>();
                if (r.contains("workspace_bytes")) t.def.workspace_bytes = r["workspace_bytes"].get<std::uint64_t>();
                if (!std::all_of(t.layers.begin(), t.layers.end(), [this](const std::string& id) { return layer_exists(id); })) {
                    spdlog::warn("templates: {}:{} lost a layer; it is not offered", t.name, t.tag);
                    continue;
                }
                register_kernelspec(t);
                if (t.def.pool > 0) pools_to_start_.emplace_back(t.kernelspec, t.def.pool);
                templates_[t.kernelspec] = std::move(t);
            } catch (const std::exception& e) {
                spdlog::warn("templates: skipped {}: {}", f.path().string(), e.what());
            }
        }
    }
}

json template_store::list(const std::string& tenant) const {
    std::lock_guard lock(mutex_);
    json out = json::array();
    for (const auto& [_, t] : templates_)
        if (t.tenant == tenant) out.push_back(t.model());
    return out;
}

std::optional<json> template_store::get(const std::string& tenant, const std::string& name,
                                        const std::optional<std::string>& tag) const {
    std::lock_guard lock(mutex_);
    json builds = json::array();
    if (const auto r = recent_builds_.find(tenant); r != recent_builds_.end())
        for (const auto& id : r->second)
            if (const auto b = builds_.find(id);
                b != builds_.end() && b->second->name == name && (!tag || b->second->tag == *tag))
                builds.push_back({{"build_id", id}, {"tag", b->second->tag}, {"status", b->second->status}});
    const auto it = templates_.find(kernelspec_name(tenant, name, tag.value_or("latest")));
    if (it == templates_.end()) {
        if (builds.empty()) return std::nullopt;
        // Not built (yet): what its last build says (queued, building or error).
        return json{{"name", name}, {"tag", tag.value_or("latest")}, {"status", builds.back()["status"]}, {"builds", builds}};
    }
    auto m = it->second.model();
    m["status"] = "ready";
    m["builds"] = builds;
    return m;
}

void template_store::remove(const std::string& tenant, const std::string& name, const std::optional<std::string>& tag) {
    std::lock_guard lock(mutex_);
    const auto it = templates_.find(kernelspec_name(tenant, name, tag.value_or("latest")));
    if (it == templates_.end()) throw api_exception(404, "No template '" + name + ":" + tag.value_or("latest") + "'");
    for (const auto& id : it->second.layers) {
        doomed_layers_.insert(tenant + "/" + id);
        retired_[it->second.kernelspec].insert(id);
    }
    specs_.hide(it->second.kernelspec);
    if (set_pool && it->second.def.pool > 0) set_pool(it->second.kernelspec, 0);
    if (set_runtimes && !it->second.def.runtimes.empty()) set_runtimes(it->second.kernelspec, tenant, json::array());
    // Its ended builds go with it (a running one stays, and its result lands).
    auto& recent = recent_builds_[tenant];
    std::erase_if(recent, [&](const std::string& id) {
        const auto b = builds_.find(id);
        if (b == builds_.end()) return true;
        if (b->second->name != it->second.name || b->second->tag != it->second.tag) return false;
        if (b->second->status != "ready" && b->second->status != "error") return false;
        builds_.erase(b);
        return true;
    });
    std::error_code ec;
    fs::remove(record_path(tenant, it->second.name, it->second.tag), ec);
    templates_.erase(it);
    reclaim_layers_locked();
}

void template_store::reclaim() {
    std::lock_guard lock(mutex_);
    if (!doomed_layers_.empty()) reclaim_layers_locked();
}

void template_store::reclaim_layers_locked() {
    // A layer goes once no template of its tenant stands on it, no build is
    // running for the tenant (a build may be about to use it) and no
    // session runs on a kernelspec that includes it.
    std::set<std::string> kept;
    for (const auto& [_, t] : templates_) kept.insert(t.layers.begin(), t.layers.end());
    const auto live = kernelspecs_in_use ? kernelspecs_in_use() : std::set<std::string>{};
    for (auto r = retired_.begin(); r != retired_.end();) {
        if (!live.count(r->first)) {
            r = retired_.erase(r);
            continue;
        }
        kept.insert(r->second.begin(), r->second.end());
        ++r;
    }
    std::set<std::string> busy_tenants;
    for (const auto& key : building_) busy_tenants.insert(key.substr(0, key.find('/')));
    for (auto it = doomed_layers_.begin(); it != doomed_layers_.end();) {
        const auto slash = it->find('/');
        const auto tenant = it->substr(0, slash), id = it->substr(slash + 1);
        if (kept.count(id) || busy_tenants.count(tenant)) {
            ++it;
            continue;
        }
        try {
            launcher_.remove_layer(id);
            it = doomed_layers_.erase(it);
        } catch (const std::exception& e) {
            spdlog::warn("templates: layer {} stays for now: {}", id.substr(0, 12), e.what());
            ++it;
        }
    }
}

std::optional<json> template_store::build_model(const std::string& tenant, const std::string& build_id,
                                                std::size_t logs_after) const {
    std::lock_guard lock(mutex_);
    const auto it = builds_.find(build_id);
    if (it == builds_.end() || it->second->tenant != tenant) return std::nullopt;
    const auto& b = *it->second;
    json steps = json::array();
    for (const auto& s : b.steps) {
        json j = {{"index", s.index}, {"type", s.type}, {"summary", s.summary}, {"status", s.status}, {"ms", s.ms}};
        if (s.exit_code) j["exit_code"] = *s.exit_code;
        steps.push_back(j);
    }
    json logs = json::array();
    const auto first = std::max(logs_after, b.logs_dropped);
    for (std::size_t n = first; n < b.logs_dropped + b.logs.size(); ++n) logs.push_back(b.logs[n - b.logs_dropped]);
    json out = {{"build_id", b.id},
                {"template", b.name + ":" + b.tag},
                {"status", b.status},
                {"steps", steps},
                {"cached_steps", b.cached_steps},
                {"built_steps", b.built_steps},
                {"logs", logs},
                {"logs_from", first},
                {"logs_next", b.logs_dropped + b.logs.size()},
                {"created_at_ms", b.created_ms}};
    if (b.finished_ms) out["finished_at_ms"] = b.finished_ms;
    if (b.failure) out["failure"] = *b.failure;
    return out;
}

std::optional<std::string> template_store::kernelspec_for(const std::string& tenant, const std::string& reference) const {
    const auto ref = parse_reference(reference);
    if (!ref) return std::nullopt;
    std::lock_guard lock(mutex_);
    const auto ks = kernelspec_name(tenant, ref->first, ref->second);
    return templates_.count(ks) ? std::optional(ks) : std::nullopt;
}

void template_store::render_metrics(std::string& out) const {
    std::lock_guard lock(mutex_);
    out += "# HELP cellgate_templates Templates ready to start sessions from, all tenants.\n"
           "# TYPE cellgate_templates gauge\ncellgate_templates " + std::to_string(templates_.size()) + "\n";
    out += "# HELP cellgate_template_builds_total Template builds ended, by result.\n"
           "# TYPE cellgate_template_builds_total counter\n"
           "cellgate_template_builds_total{result=\"ready\"} " + std::to_string(builds_ready_) + "\n"
           "cellgate_template_builds_total{result=\"error\"} " + std::to_string(builds_failed_) + "\n";
    out += "# HELP cellgate_template_steps_total Build steps that made a layer, or found it made.\n"
           "# TYPE cellgate_template_steps_total counter\n"
           "cellgate_template_steps_total{kind=\"built\"} " + std::to_string(steps_built_) + "\n"
           "cellgate_template_steps_total{kind=\"cached\"} " + std::to_string(steps_cached_) + "\n";
}

}  // namespace cellgate::templates
