"""The Python SDK's templates end to end against the real gateway: build_template
with its log streamed to on_log, Sandbox(template=…), list/get/delete, tags, a
failing build as TemplateBuildError, TemplateNotFound, and the CLI's
`cellgate template build|list|rm`. Each run's steps carry a word of its own,
so no earlier run's layer is found."""
import json
import uuid

import pytest

import sdk_support
from cellgate import (CellgateError, Sandbox, TemplateBuildError, TemplateNotFound, build_template, delete_template,
                      get_template, list_templates, tag_template, template_tags)


@pytest.fixture
def word():
    return uuid.uuid4().hex[:10]


def test_build_start_list_and_delete_a_template(gateway, word):
    lines = []
    build = build_template(f"sdk-{word}:v1", steps=[{"type": "ENV", "args": ["SDK_WORD", word]},
                                                    f"echo {word} > /opt/word", "cat /opt/word"],
                           url=gateway.url, token=gateway.token, on_log=lines.append)
    assert build["status"] == "ready" and build["built_steps"] == 2, build
    assert word in lines, lines  # the second step's output, through the stream
    assert any(line.startswith("Step 2/3: RUN echo") for line in lines), lines
    with Sandbox(gateway.url, gateway.token, template=f"sdk-{word}:v1") as sb:
        ex = sb.run_code("import os\nprint(open('/opt/word').read().strip(), os.environ['SDK_WORD'])")
        assert ex.logs.stdout == f"{word} {word}\n", ex.logs
    names = [t["reference"] for t in list_templates(gateway.url, gateway.token)]
    assert f"sdk-{word}:v1" in names
    assert get_template(f"sdk-{word}:v1", gateway.url, gateway.token)["env"]["SDK_WORD"] == word
    again = build_template(f"sdk-{word}:v1", steps=[{"type": "ENV", "args": ["SDK_WORD", word]},
                                                    f"echo {word} > /opt/word", "cat /opt/word"],
                           url=gateway.url, token=gateway.token)
    assert again["cached_steps"] == 2 and again["built_steps"] == 0, again
    delete_template(f"sdk-{word}:v1", gateway.url, gateway.token)
    with pytest.raises(TemplateNotFound):
        get_template(f"sdk-{word}:v1", gateway.url, gateway.token)
    with pytest.raises(TemplateNotFound):
        delete_template(f"sdk-{word}:v1", gateway.url, gateway.token)
    with pytest.raises(CellgateError) as e:
        Sandbox(gateway.url, gateway.token, template=f"sdk-{word}:v1")
    assert e.value.status == 404


def test_tags_name_one_build(gateway, word):
    build = build_template(f"sdkt-{word}:v1", steps=[f"echo {word} > /opt/word"], tags=["stable"],
                           url=gateway.url, token=gateway.token)
    assert tag_template(f"sdkt-{word}:v1", "prod", gateway.url, gateway.token) == {"build_id": build["build_id"],
                                                                                    "tags": ["prod"]}
    tags = template_tags(f"sdkt-{word}", gateway.url, gateway.token)
    assert sorted(t["tag"] for t in tags) == ["prod", "stable", "v1"]
    assert {t["build_id"] for t in tags} == {build["build_id"]}
    with Sandbox(gateway.url, gateway.token, template=f"sdkt-{word}:prod") as sb:
        assert sb.run_code("print(open('/opt/word').read().strip())").logs.stdout == f"{word}\n"
    with pytest.raises(TemplateNotFound):
        tag_template(f"sdkt-{word}:nope", "x", gateway.url, gateway.token)
    for tag in ("v1", "stable", "prod"):
        delete_template(f"sdkt-{word}:{tag}", gateway.url, gateway.token)
    with pytest.raises(TemplateNotFound):
        template_tags(f"sdkt-{word}", gateway.url, gateway.token)


def test_a_failing_build_raises_with_its_step_and_log(gateway, word):
    with pytest.raises(TemplateBuildError) as e:
        build_template(f"sdk-bad-{word}", steps=[f"echo {word} >&2; exit 4"], url=gateway.url, token=gateway.token)
    f = e.value.failure
    assert f["step"]["index"] == 0 and f["exit_code"] == 4 and word in f["log_tail"], f
    assert "exited with code 4" in str(e.value)
    with pytest.raises(CellgateError) as bad:
        build_template("Not A Name", url=gateway.url, token=gateway.token)
    assert bad.value.status == 400 and "name" in bad.value.message


def test_the_cli_builds_lists_and_removes_templates(gateway, word, tmp_path):
    definition = tmp_path / "t.json"
    definition.write_text(json.dumps({"name": f"cli-{word}", "tag": "v2", "steps": [
        {"type": "RUN", "args": [f"echo cli-{word} | tee /opt/cli-word"]}]}))
    r = sdk_support.run_cli(gateway, "template", "build", definition)
    assert r.returncode == 0, r.stderr
    assert f"cli-{word}:v2: ready (1 built, 0 cached)" in r.stdout and f"cli-{word}" in r.stderr, (r.stdout, r.stderr)
    script = tmp_path / "on_template.py"
    script.write_text("print(open('/opt/cli-word').read().strip())\n")
    r = sdk_support.run_cli(gateway, "run", "--template", f"cli-{word}:v2", script)
    assert r.returncode == 0 and r.stdout.strip() == f"cli-{word}", (r.stdout, r.stderr)
    r = sdk_support.run_cli(gateway, "template", "list", "--json")
    assert f"cli-{word}:v2" in [t["reference"] for t in json.loads(r.stdout)], r.stdout
    r = sdk_support.run_cli(gateway, "template", "rm", f"cli-{word}:v2", "never-built")
    assert r.returncode == 1 and r.stdout.split() == [f"cli-{word}:v2"] and "never-built" in r.stderr, (r.stdout, r.stderr)
    definition.write_text(json.dumps({"name": f"cli-bad-{word}", "steps": [{"type": "RUN", "args": ["exit 9"]}]}))
    r = sdk_support.run_cli(gateway, "template", "build", definition)
    assert r.returncode == 1 and "exited with code 9" in r.stderr, (r.stdout, r.stderr)


def test_files_copy_steps_a_dockerfile_and_a_start_command(gateway, word, tmp_path):
    from cellgate import copy
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text(f"print('{word}')\n")
    build = build_template(f"sdk-copy-{word}", files=tmp_path,
                           steps=[copy("app/", "/opt/app/", owner="user", mode=0o644)],
                           start_cmd="echo started > /tmp/started", ready_cmd="test -f /tmp/started",
                           url=gateway.url, token=gateway.token)
    assert build["status"] == "ready" and build["built_steps"] == 1, build
    with Sandbox(gateway.url, gateway.token, template=f"sdk-copy-{word}") as sb:
        ex = sb.run_code("import subprocess\n"
                         "print(subprocess.run(['python3', '/opt/app/main.py'], capture_output=True, text=True).stdout.strip())\n"
                         "print(open('/tmp/started').read().strip())")
        assert ex.logs.stdout == f"{word}\nstarted\n", ex.logs
    dockerfile = f"FROM python\nARG WORD=x\nCOPY app/main.py /opt/main.py\nRUN echo $WORD > /opt/word\n"
    build = build_template(f"sdk-docker-{word}", files=tmp_path, dockerfile=dockerfile, build_args={"WORD": word},
                           url=gateway.url, token=gateway.token)
    assert build["status"] == "ready", build
    with Sandbox(gateway.url, gateway.token, template=f"sdk-docker-{word}") as sb:
        assert sb.run_code("print(open('/opt/word').read().strip())").logs.stdout == f"{word}\n"
    with pytest.raises(ValueError):
        build_template(f"sdk-nofiles-{word}", steps=[copy("a", "/b")], url=gateway.url, token=gateway.token)
    for n in (f"sdk-copy-{word}", f"sdk-docker-{word}"):
        delete_template(n, gateway.url, gateway.token)
