#include "templates/definition.hpp"

#include "util/api_error.hpp"
#include "util/encoding.hpp"

#include <algorithm>
#include <filesystem>

namespace cellgate::templates {

using nlohmann::json;

namespace {

constexpr std::size_t max_steps = launcher::max_layer_depth;
constexpr std::size_t max_command_bytes = 64u << 10;
constexpr std::size_t max_packages = 256;
constexpr std::size_t max_pool = 4;  // warm sandboxes one template may keep

[[noreturn]] void bad(const std::string& why) { throw api_exception(400, why); }

void only_fields(const json& j, const char* what, std::initializer_list<const char*> known) {
    if (!j.is_object()) bad(std::string(what) + " must be an object");
    for (const auto& [key, value] : j.items())
        if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; }))
            bad(std::string(what) + " has no field '" + key.substr(0, 64) + "'");
}

std::string string_of(const json& j, const std::string& what, std::size_t max_bytes) {
    if (!j.is_string()) bad(what + " must be a string");
    auto s = j.get<std::string>();
    if (s.size() > max_bytes) bad(what + " is longer than " + std::to_string(max_bytes) + " bytes");
    if (s.find('\0') != std::string::npos) bad(what + " holds a NUL byte");
    return s;
}

std::vector<std::string> strings_of(const json& j, const std::string& what, std::size_t max_count, std::size_t max_bytes) {
    if (!j.is_array()) bad(what + " must be an array of strings");
    if (j.size() > max_count) bad(what + " has more than " + std::to_string(max_count) + " entries");
    std::vector<std::string> out;
    for (const auto& e : j) out.push_back(string_of(e, what + "'s entries", max_bytes));
    return out;
}

bool shell_name(const std::string& n) {
    return !n.empty() && n.size() <= 128 && !(n[0] >= '0' && n[0] <= '9') &&
           std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A package as a package manager takes it ("duckdb==1.1.3", "libpoppler-dev",
// "@scope/pkg@1.2"): no shell syntax, no option.
bool package_name(const std::string& p) {
    static const std::string extra = "._+-=<>~!:@/[],^*";
    return !p.empty() && p.size() <= 214 && p[0] != '-' && std::all_of(p.begin(), p.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string::npos;
    });
}

std::string joined_quoted(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& p : v) out += " " + shell_quote(p);
    return out;
}

std::uint32_t uid_of(const std::string& user) {
    if (user == "root" || user == "0") return 0;
    if (user == "user" || user == "kernel") return 1000;
    if (!user.empty() && user.size() <= 5 &&
        std::all_of(user.begin(), user.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        const auto n = std::stoul(user);
        if (n < 65536) return static_cast<std::uint32_t>(n);
    }
    bad("USER '" + user.substr(0, 64) + "' is not root, user or a uid below 65536");
}

void check_step(const step& s) {
    if (s.type == "RUN") {
        if (s.args.empty() || s.args.size() > 2) bad("a RUN step's args are [command] or [command, user]");
        if (s.args[0].empty()) bad("a RUN step's command is empty");
        if (s.args.size() == 2) uid_of(s.args[1]);
    } else if (s.type == "ENV") {
        if (s.args.empty() || s.args.size() % 2 != 0) bad("an ENV step's args are name, value pairs");
        for (std::size_t i = 0; i < s.args.size(); i += 2)
            if (!shell_name(s.args[i]) || s.args[i].starts_with("CELLGATE_"))
                bad("ENV name '" + s.args[i].substr(0, 64) + "' is not a name a template may set");
    } else if (s.type == "WORKDIR") {
        if (s.args.size() != 1 || s.args[0].empty()) bad("a WORKDIR step's args are [directory]");
    } else if (s.type == "USER") {
        if (s.args.size() != 1) bad("a USER step's args are [user]");
        uid_of(s.args[0]);
    } else if (s.type == "COPY") {
        if (s.args.size() < 2 || s.args.size() > 4)
            bad("a COPY step's args are [source, destination, owner?, mode?]");
        const auto& src = s.args[0];
        if (src.empty() || src[0] == '/' || src == ".." || src.starts_with("../") || src.find("/../") != std::string::npos ||
            src.ends_with("/.."))
            bad("a COPY step's source is a path (or glob) inside its archive, not '" + src.substr(0, 64) + "'");
        if (s.args[1].empty()) bad("a COPY step's destination is empty");
        if (s.args.size() > 2 && !s.args[2].empty()) uid_of(s.args[2].substr(0, s.args[2].find(':')));
        if (s.args.size() > 3 && !s.args[3].empty() &&
            (s.args[3].size() > 4 || !std::all_of(s.args[3].begin(), s.args[3].end(), [](char c) { return c >= '0' && c <= '7'; })))
            bad("a COPY step's mode is octal, e.g. 0644");
        if (s.files.empty())
            bad("a COPY step names the archive it copies from: 'files' is the key it was uploaded under "
                "(PUT /v1/templates/files/{key})");
        if (s.files.size() < 8 || s.files.size() > 128 ||
            !std::all_of(s.files.begin(), s.files.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }))
            bad("a COPY step's 'files' is 8 to 128 of [A-Za-z0-9_-]");
    } else {
        bad("unknown step type '" + s.type.substr(0, 32) + "' (RUN, COPY, ENV, WORKDIR, USER)");
    }
}

// A COPY step's command, run as root in the build sandbox with
// $1 source (a path or glob in the archive), $2 destination (relative to the
// working directory), $3 uid:gid, $4 mode (octal, or empty), $5 the archive.
// Docker's rules: a directory's contents go into the destination; a file
// goes to the destination, or into it when it is a directory, ends in '/'
// or several files match.
std::string copy_script() {
    return R"SH(src=$1 dest=$2 owner=$3 mode=$4 archive=$5
case $dest in /*) ;; *) dest=$(pwd)/$dest ;; esac
t=$(mktemp -d /.cellgate-copy.XXXXXX) || exit 1
trap 'rm -rf "$t"' EXIT
tar -xf "$archive" -C "$t" --no-same-owner || { echo "COPY: the uploaded archive is not a tar archive tar can read" >&2; exit 1; }
cd "$t" || exit 1
IFS='
'
set -f; pattern=$src; set +f
matches=0
for m in $pattern; do [ -e "$m" ] || [ -L "$m" ] && matches=$((matches + 1)); done
if [ "$matches" -eq 0 ]; then echo "COPY: nothing in the uploaded files matches '$src'" >&2; exit 1; fi
into=
case $dest in */) into=1 ;; esac
[ -d "$dest" ] && into=1
[ "$matches" -gt 1 ] && into=1
place() {  # $1 what was copied: its owner, and its mode if a file
  chown -h "$owner" "$1"
  if [ -n "$mode" ] && [ -f "$1" ] && [ ! -L "$1" ]; then chmod "$mode" "$1"; fi
}
for m in $pattern; do
  [ -e "$m" ] || [ -L "$m" ] || continue
  if [ -d "$m" ] && [ ! -L "$m" ]; then
    made=; [ -d "$dest" ] || made=1
    mkdir -p "$dest" && cp -a "$m/." "$dest/" || exit 1
    [ -z "$made" ] || chown "$owner" "$dest"  # cp -a gave it the archive's directory's owner
    (cd "$m" && find . -mindepth 1) | while IFS= read -r p; do place "$dest/${p#./}"; done
  elif [ -n "$into" ]; then
    [ -d "$dest" ] || { mkdir -p "$dest" && chown "$owner" "$dest"; } || exit 1
    cp -a "$m" "$dest/" && place "$dest/${m##*/}" || exit 1
  else
    mkdir -p "$(dirname "$dest")" && cp -a "$m" "$dest" && place "$dest" || exit 1
  fi
done
)SH";
}

}  // namespace

std::vector<std::string> parse_tags(const json& tags) {
    if (!tags.is_array() || tags.empty() || tags.size() > 16) throw api_exception(400, "'tags' is an array of 1 to 16 tags");
    std::vector<std::string> out;
    for (const auto& t : tags) {
        if (!t.is_string() || !valid_tag(t.get<std::string>())) throw api_exception(400, "a tag is [A-Za-z0-9_.-]{1,64}");
        if (std::find(out.begin(), out.end(), t.get<std::string>()) == out.end()) out.push_back(t.get<std::string>());
    }
    return out;
}

std::string summary_of(const step& s) {
    std::string out = s.type;
    for (const auto& a : s.args) out += " " + a;
    std::replace(out.begin(), out.end(), '\n', ' ');
    if (out.size() > 200) out = out.substr(0, 197) + "...";
    return out;
}

bool valid_template_name(const std::string& n) {
    return !n.empty() && n.size() <= 63 && (std::islower(static_cast<unsigned char>(n[0])) || std::isdigit(static_cast<unsigned char>(n[0]))) &&
           std::all_of(n.begin(), n.end(), [](char c) {
               return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '_';
           });
}

bool valid_tag(const std::string& t) {
    return !t.empty() && t.size() <= 64 && t[0] != '.' && t[0] != '-' && std::all_of(t.begin(), t.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    });
}

std::optional<std::pair<std::string, std::string>> parse_reference(const std::string& ref) {
    const auto colon = ref.find(':');
    std::string name = ref.substr(0, colon), tag = colon == std::string::npos ? "latest" : ref.substr(colon + 1);
    if (!valid_template_name(name) || !valid_tag(tag)) return std::nullopt;
    return std::pair{name, tag};
}

namespace {

// A name Piston's clients send: a language, a version or an alias.
void check_word(const std::string& s, const std::string& what) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-' || c == '_' || c == '#';
        }))
        bad(what + " is 1 to 32 of [A-Za-z0-9.+#_-], not '" + s.substr(0, 32) + "'");
}

json runtimes_of(const json& list) {
    if (!list.is_array() || list.size() > 8) bad("runtimes is a list of at most 8 runtimes");
    json out = json::array();
    for (const auto& r : list) {
        only_fields(r, "a runtime", {"language", "version", "aliases", "compile", "run"});
        for (const char* key : {"language", "version", "run"})
            if (!r.contains(key)) bad(std::string("a runtime needs ") + key);
        json one = {{"language", string_of(r["language"], "a runtime's language", 32)},
                    {"version", string_of(r["version"], "a runtime's version", 32)},
                    {"run", string_of(r["run"], "a runtime's run script", 16384)}};
        check_word(one["language"], "a runtime's language");
        check_word(one["version"], "a runtime's version");
        if (one["run"].get<std::string>().empty()) bad("a runtime's run script is empty");
        one["aliases"] = r.contains("aliases") ? strings_of(r["aliases"], "a runtime's aliases", 8, 32) : std::vector<std::string>{};
        for (const auto& a : one["aliases"]) check_word(a, "an alias");
        if (r.contains("compile")) one["compile"] = string_of(r["compile"], "a runtime's compile script", 16384);
        out.push_back(std::move(one));
    }
    return out;
}

}  // namespace

definition parse_definition(const json& body, const build_settings& settings) {
    only_fields(body, "a template", {"name", "tag", "from", "packages", "steps", "start_cmd", "ready_cmd",
                                     "resources", "kernel", "force", "runtimes"});
    definition d;
    if (!body.contains("name")) bad("a template needs a name");
    const auto ref = parse_reference(string_of(body["name"], "name", 200));
    if (!ref) bad("a template's name is [a-z0-9][a-z0-9_-]{0,62}, optionally ':' and a tag [A-Za-z0-9_.-]{1,64}");
    d.name = ref->first;
    d.tag = ref->second;
    if (body.contains("tag")) {
        d.tag = string_of(body["tag"], "tag", 64);
        if (!valid_tag(d.tag)) bad("a tag is [A-Za-z0-9_.-]{1,64}");
    }
    if (body.contains("from")) {
        const auto& from = body["from"];
        only_fields(from, "'from'", {"image", "template", "oci"});
        if (from.size() != 1) bad("'from' names one base: {\"image\": …}, {\"template\": …} or {\"oci\": …}");
        if (from.contains("oci")) {
            const auto ref = string_of(from["oci"], "from.oci", 512);
            if (!launcher::is_valid_image_reference(ref))
                bad("from.oci is an image in a registry: host[:port]/repository[:tag|@sha256:…]");
            d.base = "oci:" + ref;
        } else if (from.contains("image")) {
            d.base = string_of(from["image"], "from.image", 64);
            if (!valid_template_name(d.base)) bad("from.image names a built-in image, e.g. \"python\"");
        } else {
            const auto base = parse_reference(string_of(from["template"], "from.template", 200));
            if (!base) bad("from.template is a template's name[:tag]");
            d.base = "template:" + base->first + ":" + base->second;
        }
    }
    if (body.contains("packages")) {
        const auto& p = body["packages"];
        only_fields(p, "'packages'", {"apt", "pip", "npm"});
        auto list = [&](const char* manager) {
            if (!p.contains(manager)) return std::vector<std::string>{};
            auto v = strings_of(p[manager], std::string("packages.") + manager, max_packages, 214);
            for (const auto& name : v)
                if (!package_name(name)) bad(std::string("'") + name.substr(0, 64) + "' is not a " + manager + " package");
            return v;
        };
        // Always in this order: system libraries first, then what builds on them.
        if (auto apt = list("apt"); !apt.empty())
            d.steps.push_back({.type = "RUN", .args = {"apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get "
                                       "install -y --no-install-recommends" + joined_quoted(apt) +
                                       " && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin", "root"}, .force = false, .files = {}, .digest = {}});
        if (auto pip = list("pip"); !pip.empty()) {
            std::string index;
            if (const auto& url = settings.pip_index_url; !url.empty()) {
                index = " --index-url " + shell_quote(url);
                // The operator named a plain-HTTP index (a mirror inside its network): pip trusts it only when told.
                if (const auto host = pip_trusted_host(url); !host.empty()) index += " --trusted-host " + shell_quote(host);
            }
            d.steps.push_back({.type = "RUN", .args = {"python3 -m pip install --no-cache-dir --break-system-packages "
                                       "--disable-pip-version-check --root-user-action=ignore" +
                                       index + joined_quoted(pip), "root"}, .force = false, .files = {}, .digest = {}});
        }
        if (auto npm = list("npm"); !npm.empty()) {
            const auto& url = settings.npm_registry_url;
            d.steps.push_back({.type = "RUN", .args = {"npm install -g --no-audit --no-fund --no-update-notifier" +
                                       (url.empty() ? std::string() : " --registry " + shell_quote(url)) +
                                       joined_quoted(npm) + " && rm -rf \"$(npm config get cache)\"", "root"},
                               .force = false, .files = {}, .digest = {}});
        }
    }
    if (body.contains("steps")) {
        const auto& steps = body["steps"];
        if (!steps.is_array()) bad("'steps' must be an array");
        if (steps.size() > max_steps) bad("a template has at most " + std::to_string(max_steps) + " steps");
        std::size_t bytes = 0;
        for (const auto& s : steps) {
            only_fields(s, "a step", {"type", "args", "force", "files"});
            step out;
            if (!s.contains("type")) bad("a step needs a type");
            out.type = string_of(s["type"], "a step's type", 16);
            std::transform(out.type.begin(), out.type.end(), out.type.begin(),
                           [](char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; });
            if (s.contains("args")) out.args = strings_of(s["args"], "a step's args", 512, max_command_bytes);
            if (s.contains("force")) {
                if (!s["force"].is_boolean()) bad("a step's force is true or false");
                out.force = s["force"].get<bool>();
            }
            if (s.contains("files")) out.files = string_of(s["files"], "a step's files", 128);
            for (const auto& a : out.args) bytes += a.size();
            check_step(out);
            d.steps.push_back(std::move(out));
        }
        if (bytes > (256u << 10)) bad("a template's steps are larger than 256 KiB");
    }
    if (d.steps.size() > max_steps) bad("a template has at most " + std::to_string(max_steps) + " steps, packages included");
    for (auto [key, out] : {std::pair{"start_cmd", &d.start_cmd}, std::pair{"ready_cmd", &d.ready_cmd}})
        if (body.contains(key) && !body[key].is_null()) {
            *out = string_of(body[key], key, max_command_bytes);
            if ((*out)->empty()) out->reset();
        }
    if (body.contains("resources")) {
        const auto& r = body["resources"];
        only_fields(r, "'resources'", {"cpu_millis", "memory_bytes", "workspace_bytes"});
        auto number = [&](const char* key) -> std::optional<std::uint64_t> {
            if (!r.contains(key)) return std::nullopt;
            if (!r[key].is_number_unsigned() || r[key].get<std::uint64_t>() == 0)
                bad(std::string("resources.") + key + " must be a positive whole number");
            return r[key].get<std::uint64_t>();
        };
        if (auto v = number("cpu_millis")) d.cpu_millis = static_cast<std::uint32_t>(std::min<std::uint64_t>(*v, 1u << 30));
        d.memory_bytes = number("memory_bytes");
        d.workspace_bytes = number("workspace_bytes");
    }
    if (body.contains("kernel")) {
        const auto& k = body["kernel"];
        only_fields(k, "'kernel'", {"language", "preload", "pool", "start_timeout_s"});
        if (k.contains("start_timeout_s")) {
            if (!k["start_timeout_s"].is_number_unsigned() || k["start_timeout_s"].get<std::uint64_t>() < 1 ||
                k["start_timeout_s"].get<std::uint64_t>() > 300)
                bad("kernel.start_timeout_s is 1 to 300 seconds");
            d.start_timeout_s = k["start_timeout_s"].get<std::uint32_t>();
        }
        if (k.contains("language") && string_of(k["language"], "kernel.language", 32) != "python")
            bad("kernel.language: this gateway's templates run Python kernels");
        if (k.contains("preload")) {
            d.preload = strings_of(k["preload"], "kernel.preload", 32, 128);
            for (const auto& m : d.preload)
                if (m.empty() || !std::all_of(m.begin(), m.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }))
                    bad("kernel.preload names Python modules: '" + m.substr(0, 64) + "' is not one");
        }
        if (k.contains("pool")) {
            if (!k["pool"].is_number_unsigned() || k["pool"].get<std::uint64_t>() > max_pool)
                bad("kernel.pool is 0 to " + std::to_string(max_pool) + " warm sandboxes");
            d.pool = k["pool"].get<std::uint32_t>();
        }
    }
    if (body.contains("force")) {
        if (!body["force"].is_boolean()) bad("force is true or false");
        d.force = body["force"].get<bool>();
    }
    if (body.contains("runtimes")) d.runtimes = runtimes_of(body["runtimes"]);
    return d;
}

plan make_plan(const definition& d, const std::string& tenant, const std::string& base_image,
               const std::string& base_identity, const std::map<std::string, std::string>& base_env,
               const std::string& nonce, const std::string& base_workdir, const std::string& base_user) {
    plan p;
    p.image = base_image;
    p.env = base_env;
    p.workdir = base_workdir;
    p.user = base_user;
    std::string key = sha256_hex("cellgate template layer 1\n" + tenant + "\n" + base_identity);
    std::string parent = base_image;
    bool forced = d.force;
    for (std::size_t i = 0; i < d.steps.size(); ++i) {
        const auto& s = d.steps[i];
        forced = forced || s.force;
        planned_step out;
        out.index = i;
        out.type = s.type;
        out.summary = summary_of(s);
        if (s.type == "ENV") {
            for (std::size_t k = 0; k + 1 < s.args.size(); k += 2) p.env[s.args[k]] = s.args[k + 1];
        } else if (s.type == "WORKDIR") {
            p.workdir = std::filesystem::path(p.workdir) / s.args[0];
            p.workdir = std::filesystem::path(p.workdir).lexically_normal().string();
            if (p.workdir.size() > 1 && p.workdir.back() == '/') p.workdir.pop_back();
        } else if (s.type == "USER") {
            p.user = s.args[0];
        } else if (s.type == "RUN" || s.type == "COPY") {
            std::uint32_t uid = 0;
            std::string command;
            json what;
            if (s.type == "RUN") {
                uid = uid_of(s.args.size() == 2 ? s.args[1] : p.user);
                command = s.args[0];
                what = {{"run", s.args[0]}, {"uid", uid}, {"workdir", p.workdir}, {"env", p.env}};
            } else {
                // Unpacked and placed by root (it sets the owner); the owner
                // is the step's, else the current USER's, as E2B's copy().
                const auto owner = s.args.size() > 2 && !s.args[2].empty() ? s.args[2].substr(0, s.args[2].find(':')) : p.user;
                const auto owner_id = std::to_string(uid_of(owner));
                const std::vector<std::string> args = {s.args[0], s.args[1], owner_id + ":" + owner_id,
                                                       s.args.size() > 3 ? s.args[3] : "", copy_archive_path(i)};
                command = "set --";
                for (const auto& a : args) command += " " + shell_quote(a);
                command += "\n" + copy_script();
                what = {{"copy", s.args}, {"owner", owner_id}, {"digest", s.digest}, {"workdir", p.workdir}};
                p.copies.push_back(i);
            }
            key = sha256_hex(key + "\n" + s.type + "\n" + what.dump() + (forced ? "\n" + nonce : ""));
            out.makes_layer = true;
            out.spec.layer = key.substr(0, 48);
            out.spec.parent = parent;
            out.spec.argv = {"/bin/sh", "-c", command};
            out.spec.uid = out.spec.gid = uid;
            out.spec.cwd = p.workdir;
            out.spec.env = p.env;
            parent = launcher::layer_image(out.spec.layer);
            p.layers.push_back(out.spec.layer);
            p.image = parent;
        }
        p.steps.push_back(std::move(out));
    }
    return p;
}

std::string copy_archive_path(std::size_t step_index) {
    return "/run/egress/files-" + std::to_string(step_index) + ".tar";
}

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string pip_trusted_host(const std::string& index_url) {
    if (!index_url.starts_with("http://")) return {};
    auto authority = index_url.substr(7, index_url.find('/', 7) - 7);
    if (const auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
    return authority.substr(0, authority.find(':'));
}

std::string kernelspec_name(const std::string& tenant, const std::string& name, const std::string& tag) {
    // A name holds no '.', so "<name>.<tag>" parses one way only.
    return "t" + sha256_hex(tenant).substr(0, 12) + "-" + name + "." + tag;
}

json to_json(const definition& d) {
    json steps = json::array();
    for (const auto& s : d.steps) {
        json j = {{"type", s.type}, {"args", s.args}, {"force", s.force}};
        if (!s.files.empty()) j["files"] = s.files;
        steps.push_back(j);
    }
    json j = {{"name", d.name}, {"tag", d.tag}, {"base", d.base}, {"steps", steps}, {"preload", d.preload},
              {"pool", d.pool}, {"force", d.force}};
    if (d.start_cmd) j["start_cmd"] = *d.start_cmd;
    if (d.ready_cmd) j["ready_cmd"] = *d.ready_cmd;
    if (d.start_timeout_s) j["start_timeout_s"] = *d.start_timeout_s;
    if (!d.runtimes.empty()) j["runtimes"] = d.runtimes;
    json r = json::object();
    if (d.cpu_millis) r["cpu_millis"] = *d.cpu_millis;
    if (d.memory_bytes) r["memory_bytes"] = *d.memory_bytes;
    if (d.workspace_bytes) r["workspace_bytes"] = *d.workspace_bytes;
    j["resources"] = r;
    return j;
}

}  // namespace cellgate::templates
