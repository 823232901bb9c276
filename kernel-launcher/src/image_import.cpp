// A registry image as a template's base layer (build_step.hpp:
// image_import_spec): skopeo copies it into an OCI layout, umoci unpacks its
// root as the image's own ids, and what a sandbox needs of cellgate is added
// where the image lacks it. Everything it writes first lands on a scratch
// file system of spec.disk_bytes, so a huge image fills no host disk.
#include "cellgate/launcher/build_step.hpp"
#include "cellgate/launcher/launch_error.hpp"
#include "cellgate/launcher/launcher.hpp"
#include "command.hpp"
#include "host_fs.hpp"
#include "launcher_internal.hpp"
#include "layers.hpp"
#include "spec_validation.hpp"
#include "workspace.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>

namespace cellgate::launcher {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* step = "import-image";

json read_json(const fs::path& p) {
    auto j = json::parse(read_file(p, 16u << 20), nullptr, false);
    if (j.is_discarded()) throw launch_error(step, "the pulled image's " + p.filename().string() + " is not JSON");
    return j;
}

fs::path blob(const fs::path& layout, const std::string& digest) {
    static const std::regex sha(R"(sha256:[0-9a-f]{64})");
    if (!std::regex_match(digest, sha)) throw launch_error(step, "the pulled image names a blob '" + digest.substr(0, 80) + "'");
    return layout / "blobs" / "sha256" / digest.substr(7);
}

// Whether the image's /usr/bin/python3 can run cellgate's kernel: it is
// there and ipykernel is where a Debian or a python.org build installs it.
bool has_usable_python(const fs::path& root) {
    std::error_code ec;
    if (!fs::exists(root / "usr/bin/python3", ec) && !fs::is_symlink(root / "usr/bin/python3", ec)) return false;
    if (fs::exists(root / "usr/lib/python3/dist-packages/ipykernel", ec)) return true;
    for (const char* lib : {"usr/lib", "usr/local/lib"})
        for (auto it = fs::directory_iterator(root / lib, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
            if (it->path().filename().string().starts_with("python3"))
                for (const char* packages : {"site-packages", "dist-packages"})
                    if (fs::exists(it->path() / packages / "ipykernel", ec)) return true;
    return false;
}

// The built-in image a runtime and a static tini come from: the minimal
// Debian when it is built, else the Python data image.
fs::path runtime_image(const launcher_config& cfg) {
    try {
        return resolve_image("debian", cfg);
    } catch (const std::exception&) {
        return resolve_image("python", cfg);
    }
}

// What a sandbox needs that the image may lack: the mount points, the
// kernel's user (uid 1000), /home/user as the workspace, cellgate's entry
// points and tini (static: it runs on any libc).
void add_runtime(const fs::path& root, const launcher_config& cfg) {
    std::error_code ec;
    for (const char* d : {"workspace", "run/kernel", "run/egress", "volumes", "tmp", "proc", "sys", "dev", "opt/cellgate", "home",
                          "usr/bin"})
        fs::create_directories(root / d, ec);
    ::chmod((root / "tmp").c_str(), 01777);
    if (!fs::exists(root / "home/user", ec) && !fs::is_symlink(root / "home/user", ec))
        fs::create_symlink("/workspace", root / "home/user", ec);
    const auto python = resolve_image("python", cfg);
    for (const char* f : {"cellgate-kernel", "cellgate-context", "cellgate-egress", "cellgate-zygote"})
        fs::copy_file(python / "opt/cellgate" / f, root / "opt/cellgate" / f, fs::copy_options::overwrite_existing, ec);
    if (!fs::exists(root / "usr/bin/tini", ec) && !fs::is_symlink(root / "usr/bin/tini", ec)) {
        const auto from = runtime_image(cfg) / "usr/bin/tini-static";
        fs::copy_file(fs::exists(from, ec) ? from : python / "usr/bin/tini", root / "usr/bin/tini", ec);
    }
    auto has_uid_1000 = [&](const fs::path& passwd) {
        std::ifstream in(passwd);
        for (std::string line; std::getline(in, line);) {
            const auto a = line.find(':'), b = line.find(':', a + 1), c = line.find(':', b + 1);
            if (a != std::string::npos && c != std::string::npos && line.substr(b + 1, c - b - 1) == "1000") return true;
        }
        return false;
    };
    fs::create_directories(root / "etc", ec);
    if (!has_uid_1000(root / "etc/passwd")) {
        std::ofstream(root / "etc/passwd", std::ios::app) << "kernel:x:1000:1000:cellgate kernel:/home/user:/bin/sh\n";
        std::ofstream(root / "etc/group", std::ios::app) << "kernel:x:1000:\n";
    }
}

// A Python for an image that has none able to run the kernel: the runtime
// image's whole root, hard-linked (no copy: the layer store and the image
// store share a file system) at /opt/cellgate/runtime, run by its own
// dynamic loader and libraries whatever the image's libc, through
// /opt/cellgate/python3. The image's /usr/bin/python3 becomes that when it
// has none; else cellgate's entry points use it and the image's stays.
void add_python(const fs::path& root, const launcher_config& cfg) {
    const auto from = runtime_image(cfg);
    const auto to = root / "opt/cellgate/runtime";
    auto linked = run_command({"cp", "-al", "--no-target-directory", from.string(), to.string()}, std::chrono::minutes(5));
    if (linked.exit_code != 0) {
        std::error_code ec;
        fs::remove_all(to, ec);
        linked = run_command({"cp", "-a", "--no-target-directory", from.string(), to.string()}, std::chrono::minutes(10));
        if (linked.exit_code != 0) throw launch_error(step, "adding a Python runtime: " + linked.output.substr(0, 2000));
    }
    const std::string rt = "/opt/cellgate/runtime";
    write_file(step, root / "opt/cellgate/python3",
               "#!/bin/sh\n"
               "# cellgate's Python (Debian's, with ipykernel) for an image that has none: its own loader and libraries.\n"
               "exec " + rt + "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path " + rt +
                   "/usr/lib/x86_64-linux-gnu " + rt + "/usr/bin/python3 \"$@\"\n",
               0755);
    std::error_code ec;
    if (!fs::exists(root / "usr/bin/python3", ec) && !fs::is_symlink(root / "usr/bin/python3", ec)) {
        fs::create_symlink("/opt/cellgate/python3", root / "usr/bin/python3", ec);
        if (ec) throw launch_error(step, "adding a Python runtime: " + ec.message());
        return;
    }
    for (const char* f : {"cellgate-kernel", "cellgate-context", "cellgate-egress", "cellgate-zygote"}) {
        const auto p = root / "opt/cellgate" / f;
        auto text = read_file(p, 1u << 20);
        if (text.starts_with("#!/usr/bin/python3")) text = "#!/opt/cellgate/python3" + text.substr(18);
        fs::remove(p, ec);
        write_file(step, p, text, 0755);
    }
}

}  // namespace

bool is_valid_image_reference(std::string_view ref) {
    static const std::regex form(
        R"([a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})?)");
    return !ref.empty() && ref.size() <= 512 && std::regex_match(ref.begin(), ref.end(), form);
}

void to_json(json& j, const image_import_spec& s) {
    j = {{"layer", s.layer}, {"reference", s.reference}, {"tls_verify", s.tls_verify},
         {"disk_bytes", s.disk_bytes}, {"timeout_ms", s.timeout.count()}};
}

void from_json(const json& j, image_import_spec& s) {
    static const std::set<std::string> known = {"layer", "reference", "tls_verify", "disk_bytes", "timeout_ms"};
    if (!j.is_object()) throw spec_error("an image import is a JSON object");
    for (const auto& [key, value] : j.items())
        if (known.count(key) == 0) throw spec_error("an image import has no field '" + key.substr(0, 64) + "'");
    try {
        s.layer = j.at("layer").get<std::string>();
        s.reference = j.at("reference").get<std::string>();
        s.tls_verify = j.value("tls_verify", true);
        s.disk_bytes = j.value("disk_bytes", std::uint64_t{8} << 30);
        s.timeout = std::chrono::milliseconds(j.value("timeout_ms", std::int64_t{600000}));
    } catch (const nlohmann::json::exception& e) {
        throw spec_error(std::string("an image import's fields have the wrong types: ") + e.what());
    }
}

void to_json(json& j, const image_import_result& r) {
    j = {{"digest", r.digest}, {"env", r.env}, {"workdir", r.workdir}, {"user", r.user},
         {"python_added", r.python_added}, {"layer_bytes", r.layer_bytes}, {"ms", r.ms}};
}

void from_json(const json& j, image_import_result& r) {
    r.digest = j.value("digest", std::string());
    r.env = j.value("env", std::map<std::string, std::string>{});
    r.workdir = j.value("workdir", std::string());
    r.user = j.value("user", std::string());
    r.python_added = j.value("python_added", false);
    r.layer_bytes = j.value("layer_bytes", std::uint64_t{0});
    r.ms = j.value("ms", 0.0);
}

image_import_result launcher::impl::import_image(const image_import_spec& s) {
    const auto t0 = clock_type::now();
    if (!is_valid_layer_id(s.layer)) throw spec_error("a layer id is 48 lower-case hex digits");
    if (!is_valid_image_reference(s.reference))
        throw spec_error("'" + s.reference.substr(0, 100) + "' is not an image reference (host[:port]/repository[:tag|@sha256:…])");
    if (s.timeout < std::chrono::seconds(1) || s.timeout > std::chrono::hours(24))
        throw spec_error("an image import's time limit is between 1 s and 24 h");
    if (s.disk_bytes < (64ull << 20) || s.disk_bytes > cfg.max_limits.workspace_bytes)
        throw spec_error("an image import's disk is between 64 MiB and " + std::to_string(cfg.max_limits.workspace_bytes) + " bytes");
    const fs::path store = new_layer_store(s.layer, cfg, step);
    std::error_code ec;
    const std::string id = "i-" + s.layer.substr(0, 12) + "-" + random_hex(8);
    const fs::path tmp = store / (".tmp-" + id);
    const fs::path dir = cfg.state_dir / "imports" / id;
    const fs::path scratch_image = store / (".tmp-" + id + ".img");
    teardown_guard guard;
    guard.add([&] {
        for (const auto& m : mounts_under(dir)) unmount("teardown", m);
        fs::remove_all(dir, ec);
        fs::remove_all(tmp, ec);
        fs::remove(scratch_image, ec);
    });
    fs::create_directories(dir.parent_path(), ec);
    make_dir(step, dir, 0700, true);
    make_ext4_image(scratch_image, s.disk_bytes, 0, 0, "import");
    const auto mounted = run_command({"mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", scratch_image.string(), dir.string()},
                                     std::chrono::seconds(30));
    if (mounted.exit_code != 0) throw launch_error(step, "mounting the import's scratch file system: " + mounted.output);
    const auto deadline = clock_type::now() + s.timeout;
    auto left = [&] {
        return std::max(std::chrono::milliseconds(1000),
                        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()));
    };

    // The pull: no signature policy is asked for (the operator names the registries).
    const auto layout = dir / "oci";
    std::vector<std::string> pull = {"skopeo", "--insecure-policy", "copy", "--retry-times", "0"};
    if (!s.tls_verify) pull.push_back("--src-tls-verify=false");
    pull.push_back("docker://" + s.reference);
    pull.push_back("oci:" + layout.string() + ":image");
    const auto pulled = run_command(pull, left());
    if (pulled.exit_code != 0)
        throw launch_error(step, "pulling " + s.reference + (pulled.timed_out ? ": timed out" : ": " + pulled.output.substr(0, 2000)));
    const auto root = dir / "rootfs";
    const auto unpacked = run_command({"umoci", "raw", "unpack", "--image", layout.string() + ":image", root.string()}, left());
    if (unpacked.exit_code != 0)
        throw launch_error(step, "unpacking " + s.reference + (unpacked.timed_out ? ": timed out" : ": " + unpacked.output.substr(0, 2000)));

    image_import_result out;
    const auto index = read_json(layout / "index.json");
    if (!index.contains("manifests") || !index["manifests"].is_array() || index["manifests"].empty())
        throw launch_error(step, "the pulled image has no manifest");
    out.digest = index["manifests"][0].value("digest", "");
    const auto manifest = read_json(blob(layout, out.digest));
    const auto config = read_json(blob(layout, manifest.value("config", json::object()).value("digest", "")));
    const auto& c = config.value("config", json::object());
    for (const auto& e : c.value("Env", json::array()))
        if (e.is_string()) {
            const auto v = e.get<std::string>();
            const auto eq = v.find('=');
            if (eq != std::string::npos && eq > 0 && !v.starts_with("CELLGATE_")) out.env[v.substr(0, eq)] = v.substr(eq + 1);
        }
    if (out.env.size() > 256) throw launch_error(step, "the image sets more than 256 environment variables");
    out.workdir = c.value("WorkingDir", "");
    out.user = c.value("User", "");
    if (!fs::exists(root / "bin/sh", ec) && !fs::is_symlink(root / "bin/sh", ec))
        throw launch_error(step, s.reference + " has no /bin/sh: a template's steps and start command need a shell");
    add_runtime(root, cfg);
    out.python_added = !has_usable_python(root);

    make_dir(step, tmp, 0700, true);
    const auto copied = run_command({"cp", "-a", "--no-target-directory", root.string(), (tmp / "diff").string()}, left());
    if (copied.exit_code != 0) throw launch_error(step, "copying the image's root into its layer: " + copied.output);
    if (out.python_added) add_python(tmp / "diff", cfg);
    write_file(step, tmp / "config.json", json{{"reference", s.reference}, {"digest", out.digest}, {"env", out.env},
                                               {"workdir", out.workdir}, {"user", out.user},
                                               {"python_added", out.python_added}}.dump(), 0644);
    out.layer_bytes = seal_layer(tmp, s.layer, "base " + out.digest, cfg, step);
    out.ms = ms_since(t0);
    return out;
}

image_import_result launcher::import_image(const image_import_spec& spec) { return impl_->import_image(spec); }

}  // namespace cellgate::launcher
