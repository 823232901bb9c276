// A single-stage Dockerfile as a template's definition
// (templates/dockerfile.hpp): which instructions become which steps, ARG and
// ENV substitution, COPY's flags, CMD and ENTRYPOINT as the start command,
// and a 400 naming the line for what it cannot take.
#include "templates/dockerfile.hpp"

#include "util/api_error.hpp"

#include <gtest/gtest.h>

using namespace cellgate;
using nlohmann::json;
using templates::dockerfile_definition;

namespace {

std::string refusal(const std::string& text, const std::string& files = "ctx12345") {
    try {
        dockerfile_definition(text, files, {});
    } catch (const api_exception& e) {
        EXPECT_EQ(e.status(), 400u);
        return e.what();
    }
    return "accepted";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Dockerfile, maps_each_instruction_onto_a_step) {
    const auto d = dockerfile_definition(
        "# comment\nFROM docker.io/library/python:3.11-slim AS base\n"
        "ENV A=1 B=\"two words\"\nWORKDIR /srv\nUSER user:user\n"
        "RUN apt-get update && \\\n    apt-get install -y curl\n"
        "COPY --chown=1000:1000 --chmod=0640 src/ ./app/\n"
        "EXPOSE 8000\nLABEL a=b\nCMD [\"python3\", \"-m\", \"http.server\"]\n",
        "ctx12345", {});
    EXPECT_EQ(d["from"], json({{"image", "python"}}));
    const auto& s = d["steps"];
    ASSERT_EQ(s.size(), 5u) << s.dump();
    EXPECT_EQ(s[0], json::parse(R"({"type": "ENV", "args": ["A", "1", "B", "two words"]})"));
    EXPECT_EQ(s[1], json::parse(R"({"type": "WORKDIR", "args": ["/srv"]})"));
    EXPECT_EQ(s[2], json::parse(R"({"type": "USER", "args": ["user"]})"));
    EXPECT_EQ(s[3]["args"][0], "apt-get update &&  apt-get install -y curl");  // each line trimmed, joined by a space
    EXPECT_EQ(s[4], json::parse(R"({"type": "COPY", "args": ["src/", "./app/", "1000", "0640"], "files": "ctx12345"})"));
    EXPECT_EQ(d["start_cmd"], "'python3' '-m' 'http.server'");
}

TEST(Dockerfile, the_built_in_images_are_bases_by_their_docker_names) {
    EXPECT_EQ(dockerfile_definition("FROM node:20-bookworm\nRUN npm -v\n", "", {})["from"], json({{"image", "node"}}));
    EXPECT_EQ(dockerfile_definition("FROM docker.io/library/python:3.11\n", "", {})["from"], json({{"image", "python"}}));
    EXPECT_EQ(dockerfile_definition("FROM library/debian\n", "", {})["from"], json({{"image", "debian"}}));
}

TEST(Dockerfile, substitutes_args_and_env_where_docker_does) {
    const auto d = dockerfile_definition("ARG BASE=debian\nFROM ${BASE}:bookworm\nARG DIR=/opt/x\nENV HOME_DIR=${DIR}/home\n"
                                         "WORKDIR $HOME_DIR\nRUN echo $DIR\nENV X=${UNSET:-fallback} Y=${DIR:+set}\n",
                                         "", {{"DIR", "/given"}});
    EXPECT_EQ(d["from"], json({{"image", "debian"}}));
    EXPECT_EQ(d["steps"][0]["args"], json::parse(R"(["HOME_DIR", "/given/home"])"));
    EXPECT_EQ(d["steps"][1]["args"], json::parse(R"(["/given/home"])"));
    // A RUN step sees ARG values in its environment (as in Docker, not kept in the image).
    EXPECT_TRUE(contains(d["steps"][2]["args"][0], "export DIR='/given'; ")) << d["steps"][2].dump();
    EXPECT_TRUE(contains(d["steps"][2]["args"][0], "echo $DIR"));
    EXPECT_EQ(d["steps"][3]["args"], json::parse(R"(["X", "fallback", "Y", "set"])"));
}

TEST(Dockerfile, a_from_naming_no_builtin_image_is_a_template_of_the_tenants) {
    EXPECT_EQ(dockerfile_definition("FROM analytics:v2\n", "", {})["from"], json({{"template", "analytics:v2"}}));
    EXPECT_EQ(dockerfile_definition("FROM ghcr.io/org/img:1\n", "", {})["from"], json({{"oci", "ghcr.io/org/img:1"}}));
    EXPECT_EQ(dockerfile_definition("FROM 127.0.0.1:5000/team/base\n", "", {})["from"], json({{"oci", "127.0.0.1:5000/team/base"}}));
    EXPECT_TRUE(contains(refusal("FROM Upper/Case\n"), "registry"));
}

TEST(Dockerfile, entrypoint_then_cmd_is_the_start_command) {
    const auto d = dockerfile_definition("FROM python\nENTRYPOINT [\"redis-server\"]\nCMD --port 7000\n", "", {});
    EXPECT_EQ(d["start_cmd"], "'redis-server' --port 7000");
    EXPECT_FALSE(dockerfile_definition("FROM python\n", "", {}).contains("start_cmd"));
}

TEST(Dockerfile, refuses_what_it_cannot_take_naming_the_line) {
    EXPECT_TRUE(contains(refusal("FROM python\nRUN true\nFROM debian\n"), "line 3 (FROM): a second FROM"));
    EXPECT_TRUE(contains(refusal("FROM python\nVOLUME /data\n"), "line 2 (VOLUME)"));
    EXPECT_TRUE(contains(refusal("FROM python\nSHELL [\"/bin/bash\"]\n"), "line 2 (SHELL)"));
    EXPECT_TRUE(contains(refusal("RUN true\n"), "FROM"));
    EXPECT_TRUE(contains(refusal(""), "no FROM"));
    EXPECT_TRUE(contains(refusal("FROM python\nCOPY --from=build /a /b\n"), "multi-stage"));
    EXPECT_TRUE(contains(refusal("FROM python\nCOPY a b c\n"), "ends in '/'"));
    EXPECT_TRUE(contains(refusal("FROM python\nADD https://x.test/a.tgz /opt/\n"), "URL"));
    EXPECT_TRUE(contains(refusal("FROM python\nCOPY a /b\n", ""), "send them as 'files'"));
    EXPECT_TRUE(contains(refusal("FROM python\nRUN <<EOF\necho hi\nEOF\n"), "heredocs"));
    EXPECT_TRUE(contains(refusal("FROM python\nRUN --mount=type=cache,target=/root/.cache pip install x\n"), "flags"));
    EXPECT_TRUE(contains(refusal("FROM python\nENV A=\"open\n"), "unclosed quote"));
    EXPECT_TRUE(contains(refusal("FROM python\nRUN echo \\\n"), "'\\'"));
    EXPECT_TRUE(contains(refusal("ARG 1X=2\nFROM python\n"), "ARG name"));
    EXPECT_TRUE(contains(refusal("FROM python\nHEALTHCHECK CMD curl -f localhost\n"), "ready_cmd"));
    EXPECT_EQ(refusal("FROM python\nHEALTHCHECK NONE\n"), "accepted");
}

TEST(Dockerfile, expand_keeps_the_bodys_other_fields_and_refuses_two_definitions) {
    const auto body = json::parse(R"({"name": "a:v1", "dockerfile": "FROM python\nCMD sleep 1\n", "files": "ctx12345",
                                      "kernel": {"pool": 1}, "ready_cmd": "true"})");
    const auto d = templates::expand_dockerfile(body);
    EXPECT_EQ(d["name"], "a:v1");
    EXPECT_EQ(d["kernel"]["pool"], 1);
    EXPECT_EQ(d["ready_cmd"], "true");
    EXPECT_EQ(d["start_cmd"], "sleep 1");
    EXPECT_FALSE(d.contains("dockerfile") || d.contains("files"));
    EXPECT_THROW(templates::expand_dockerfile(json::parse(R"({"name": "a", "dockerfile": "FROM python", "steps": []})")),
                 api_exception);
    const auto plain = json::parse(R"({"name": "a", "steps": []})");
    EXPECT_EQ(templates::expand_dockerfile(plain), plain);
}
