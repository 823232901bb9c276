#include "templates/dockerfile.hpp"

#include "templates/definition.hpp"
#include "util/api_error.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>
#include <vector>

namespace cellgate::templates {

using nlohmann::json;

namespace {

constexpr std::size_t max_text_bytes = 1u << 20;

struct instruction {
    std::size_t line = 0;  // where it starts, from 1
    std::string keyword;   // upper case
    std::string rest;      // trimmed, continuations joined
};

[[noreturn]] void bad(const instruction& in, const std::string& why) {
    throw api_exception(400, "Dockerfile line " + std::to_string(in.line) + " (" + in.keyword + "): " + why);
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::vector<instruction> instructions_of(const std::string& text) {
    std::vector<instruction> out;
    std::istringstream lines(text);
    std::string line, pending;
    std::size_t n = 0, start = 0;
    while (std::getline(lines, line)) {
        ++n;
        const auto t = trim(line);
        if (t.empty() || t[0] == '#') continue;  // comments and blank lines, also inside a continuation
        if (pending.empty()) start = n;
        if (t.back() == '\\') {
            pending += t.substr(0, t.size() - 1) + " ";
            continue;
        }
        pending += t;
        instruction in;
        in.line = start;
        const auto space = pending.find_first_of(" \t");
        in.keyword = pending.substr(0, space);
        std::transform(in.keyword.begin(), in.keyword.end(), in.keyword.begin(),
                       [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
        in.rest = space == std::string::npos ? "" : trim(pending.substr(space));
        out.push_back(std::move(in));
        pending.clear();
    }
    if (!pending.empty()) throw api_exception(400, "Dockerfile line " + std::to_string(start) + ": ends in a '\\' with no line after it");
    return out;
}

// $X, ${X}, ${X:-default}, ${X:+alternative}; \$ is a '$'.
std::string expand(const instruction& in, const std::string& s, const std::map<std::string, std::string>& vars) {
    std::string out;
    auto value = [&](const std::string& name) {
        const auto it = vars.find(name);
        return it == vars.end() ? std::optional<std::string>() : std::optional(it->second);
    };
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '$') {
            out += '$';
            ++i;
        } else if (s[i] != '$' || i + 1 == s.size()) {
            out += s[i];
        } else if (s[i + 1] == '{') {
            const auto end = s.find('}', i + 2);
            if (end == std::string::npos) bad(in, "a '${' with no '}'");
            const auto body = s.substr(i + 2, end - i - 2);
            const auto op = body.find(':');
            const auto v = value(body.substr(0, op));
            if (op == std::string::npos) out += v.value_or("");
            else if (body.compare(op, 2, ":-") == 0) out += v && !v->empty() ? *v : body.substr(op + 2);
            else if (body.compare(op, 2, ":+") == 0) out += v && !v->empty() ? body.substr(op + 2) : "";
            else bad(in, "'${" + body.substr(0, 64) + "}' is not a substitution this gateway takes");
            i = end;
        } else if (std::isalpha(static_cast<unsigned char>(s[i + 1])) || s[i + 1] == '_') {
            std::size_t j = i + 1;
            while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
            out += value(s.substr(i + 1, j - i - 1)).value_or("");
            i = j - 1;
        } else {
            out += s[i];
        }
    }
    return out;
}

// Words as a shell splits them: quotes kept together and taken off, '\' escaping.
std::vector<std::string> words_of(const instruction& in, const std::string& s) {
    std::vector<std::string> out;
    std::string word;
    bool in_word = false;
    char quote = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (quote) {
            if (c == quote) quote = 0;
            else if (c == '\\' && quote == '"' && i + 1 < s.size()) word += s[++i];
            else word += c;
        } else if (c == '"' || c == '\'') {
            quote = c;
            in_word = true;
        } else if (c == '\\' && i + 1 < s.size()) {
            word += s[++i];
            in_word = true;
        } else if (c == ' ' || c == '\t') {
            if (in_word) out.push_back(word);
            word.clear();
            in_word = false;
        } else {
            word += c;
            in_word = true;
        }
    }
    if (quote) bad(in, "an unclosed quote");
    if (in_word) out.push_back(word);
    return out;
}

// The exec form (a JSON array of strings), if `rest` is one.
std::optional<std::vector<std::string>> exec_form(const std::string& rest) {
    if (rest.empty() || rest[0] != '[') return std::nullopt;
    const auto j = json::parse(rest, nullptr, false);
    if (!j.is_array() || !std::all_of(j.begin(), j.end(), [](const json& e) { return e.is_string(); })) return std::nullopt;
    return j.get<std::vector<std::string>>();
}

std::string as_command(const std::string& rest) {
    const auto argv = exec_form(rest);
    if (!argv) return rest;
    std::string out;
    for (const auto& a : *argv) out += (out.empty() ? "" : " ") + shell_quote(a);
    return out;
}

json base_of(const instruction& in, const std::string& image) {
    auto repo = image.substr(0, image.find_first_of(":@"));
    for (const char* prefix : {"docker.io/library/", "library/", "docker.io/"})
        if (repo.starts_with(prefix)) repo = repo.substr(std::string(prefix).size());
    if (repo == "python" || repo == "debian" || repo == "node") return {{"image", repo}};
    // host[:port]/repository: an image in a registry (the operator's list decides at build time).
    if (const auto slash = image.find('/'); slash != std::string::npos &&
        image.substr(0, slash).find_first_of(".:") != std::string::npos) {
        if (!launcher::is_valid_image_reference(image)) bad(in, "'" + image.substr(0, 100) + "' is not an image reference");
        return {{"oci", image}};
    }
    if (!parse_reference(image))
        bad(in, "'" + image.substr(0, 100) + "' is neither a built-in image (python, debian), an image in a registry "
                "(host[:port]/repository:tag) nor a template of yours");
    return {{"template", image}};
}

}  // namespace

json dockerfile_definition(const std::string& text, const std::string& files,
                           const std::map<std::string, std::string>& build_args) {
    if (text.size() > max_text_bytes) throw api_exception(400, "A Dockerfile is at most 1 MiB");
    if (text.find('\0') != std::string::npos) throw api_exception(400, "The Dockerfile holds a NUL byte");
    json out = {{"steps", json::array()}};
    std::map<std::string, std::string> args, env;  // ARG values in scope; ENV values so far
    auto vars = [&] {
        auto all = args;
        for (const auto& [k, v] : env) all[k] = v;
        return all;
    };
    std::optional<std::string> entrypoint, cmd;
    bool from = false;
    for (const auto& in : instructions_of(text)) {
        const auto& k = in.keyword;
        if (in.rest.starts_with("<<") || in.rest.find(" <<") != std::string::npos) {
            if (k == "RUN" || k == "COPY" || k == "ADD") bad(in, "heredocs are not supported; write the lines out");
        }
        if (k == "ARG") {
            for (const auto& w : words_of(in, in.rest)) {
                const auto eq = w.find('=');
                const auto name = w.substr(0, eq);
                if (name.empty() || name.size() > 128 || std::isdigit(static_cast<unsigned char>(name[0])) ||
                    !std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }))
                    bad(in, "'" + name.substr(0, 64) + "' is not an ARG name");
                if (const auto given = build_args.find(name); given != build_args.end()) args[name] = given->second;
                else if (eq != std::string::npos) args[name] = expand(in, w.substr(eq + 1), vars());
                else args.emplace(name, "");
            }
            continue;
        }
        if (k == "FROM") {
            if (from) bad(in, "a second FROM: multi-stage builds are not supported (one FROM per Dockerfile)");
            auto words = words_of(in, expand(in, in.rest, vars()));
            std::erase_if(words, [](const std::string& w) { return w.starts_with("--platform="); });
            if (words.empty() || (words.size() != 1 && !(words.size() == 3 && (words[1] == "AS" || words[1] == "as"))))
                bad(in, "FROM takes an image, optionally 'AS name'");
            out["from"] = base_of(in, words[0]);
            from = true;
            continue;
        }
        if (!from) bad(in, "the first instruction (after ARGs) is FROM");
        if (k == "RUN") {
            if (in.rest.starts_with("--")) bad(in, "RUN's flags (--mount, --network, …) are not supported");
            // ARG values are the command's environment while it runs, as in Docker (not kept in the image).
            std::string prefix;
            for (const auto& [name, value] : args)
                if (!env.count(name)) prefix += "export " + name + "=" + shell_quote(value) + "; ";
            out["steps"].push_back({{"type", "RUN"}, {"args", {prefix + as_command(in.rest)}}});
        } else if (k == "COPY" || k == "ADD") {
            auto words = exec_form(in.rest).value_or(words_of(in, expand(in, in.rest, vars())));
            std::string owner = "root", mode;
            while (!words.empty() && words[0].starts_with("--")) {
                const auto flag = words[0];
                if (flag.starts_with("--chown=")) owner = flag.substr(8, flag.find(':') == std::string::npos ? std::string::npos : flag.find(':') - 8);
                else if (flag.starts_with("--chmod=")) mode = flag.substr(8);
                else if (flag.starts_with("--from=")) bad(in, "COPY --from needs another stage: multi-stage builds are not supported");
                else if (flag != "--link") bad(in, "the flag '" + flag.substr(0, 32) + "' is not supported");
                words.erase(words.begin());
            }
            if (words.size() < 2) bad(in, k + " takes one or more sources and a destination");
            const auto dest = words.back();
            words.pop_back();
            if (words.size() > 1 && !dest.ends_with("/")) bad(in, "with several sources the destination ends in '/'");
            for (const auto& src : words) {
                if (src.find("://") != std::string::npos) bad(in, "ADD of a URL is not supported: fetch it in a RUN step");
                if (files.empty()) bad(in, k + " copies from the files uploaded with the Dockerfile: send them as 'files'");
                auto rel = src;
                while (rel.starts_with("./")) rel = rel.substr(2);
                if (rel.empty()) rel = ".";
                out["steps"].push_back({{"type", "COPY"}, {"args", {rel, dest, owner, mode}}, {"files", files}});
            }
        } else if (k == "ENV") {
            const auto words = words_of(in, expand(in, in.rest, vars()));
            json step_args = json::array();
            if (!words.empty() && words[0].find('=') == std::string::npos) {
                // The old form: ENV NAME the rest of the line.
                const auto space = in.rest.find_first_of(" \t");
                if (space == std::string::npos) bad(in, "ENV takes NAME=value pairs");
                const auto value = trim(expand(in, in.rest.substr(space), vars()));
                env[words[0]] = value;
                step_args = {words[0], value};
            } else {
                for (const auto& w : words) {
                    const auto eq = w.find('=');
                    if (eq == std::string::npos || eq == 0) bad(in, "ENV takes NAME=value pairs");
                    env[w.substr(0, eq)] = w.substr(eq + 1);
                    step_args.push_back(w.substr(0, eq));
                    step_args.push_back(w.substr(eq + 1));
                }
            }
            out["steps"].push_back({{"type", "ENV"}, {"args", step_args}});
        } else if (k == "WORKDIR") {
            out["steps"].push_back({{"type", "WORKDIR"}, {"args", {expand(in, in.rest, vars())}}});
        } else if (k == "USER") {
            const auto user = expand(in, in.rest, vars());
            out["steps"].push_back({{"type", "USER"}, {"args", {user.substr(0, user.find(':'))}}});
        } else if (k == "CMD") {
            cmd = as_command(in.rest);
        } else if (k == "ENTRYPOINT") {
            entrypoint = as_command(in.rest);
        } else if (k == "LABEL" || k == "EXPOSE" || k == "STOPSIGNAL" || k == "MAINTAINER") {
            continue;
        } else if (k == "HEALTHCHECK") {
            if (trim(in.rest) != "NONE") bad(in, "a health check is not supported; a template's ready_cmd says when its start command is up");
        } else {
            bad(in, "not supported (FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, CMD, ENTRYPOINT, LABEL, EXPOSE)");
        }
    }
    if (!from) throw api_exception(400, "The Dockerfile has no FROM");
    if (entrypoint || cmd) out["start_cmd"] = trim(entrypoint.value_or("") + " " + cmd.value_or(""));
    return out;
}

json expand_dockerfile(const json& body) {
    if (!body.is_object() || !body.contains("dockerfile")) return body;
    for (const char* k : {"from", "steps", "packages"})
        if (body.contains(k)) throw api_exception(400, std::string("A template is a Dockerfile or '") + k + "', not both");
    if (!body["dockerfile"].is_string()) throw api_exception(400, "'dockerfile' must be a string");
    std::string files;
    if (body.contains("files")) {
        if (!body["files"].is_string()) throw api_exception(400, "'files' must be the key of an uploaded archive");
        files = body["files"].get<std::string>();
    }
    std::map<std::string, std::string> build_args;
    if (body.contains("build_args")) {
        const auto& a = body["build_args"];
        if (!a.is_object() || a.size() > 64) throw api_exception(400, "'build_args' is an object of at most 64 strings");
        for (const auto& [k, v] : a.items()) {
            if (!v.is_string() || v.get<std::string>().size() > 4096) throw api_exception(400, "build_args." + k.substr(0, 64) + " must be a string of at most 4096 bytes");
            build_args[k] = v.get<std::string>();
        }
    }
    auto out = dockerfile_definition(body["dockerfile"].get<std::string>(), files, build_args);
    for (const auto& [k, v] : body.items())
        if (k != "dockerfile" && k != "files" && k != "build_args") out[k] = v;  // the request's start_cmd over CMD/ENTRYPOINT
    return out;
}

}  // namespace cellgate::templates
