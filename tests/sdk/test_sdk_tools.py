"""The LLM tool adapter: the function definition's shape, and what
handle_tool_call gives a model for real executions."""
import base64
import json

import jsonschema
import pytest

import sdk_support  # noqa: F401
from cellgate import Sandbox
from cellgate.tools import (TOOL_DEFINITION, anthropic_tool, anthropic_tool_result, content_parts,
                            handle_tool_call, openai_tool, openai_tool_messages)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_definition_is_a_function_schema():
    d = json.loads(json.dumps(TOOL_DEFINITION))
    assert d["name"] == "run_python" and len(d["description"]) > 50
    params = d["parameters"]
    jsonschema.Draft202012Validator.check_schema(params)
    jsonschema.Draft7Validator.check_schema(params)
    assert params["type"] == "object" and params["required"] == ["code"]
    assert params["properties"]["code"]["type"] == "string"
    jsonschema.validate({"code": "print(1)"}, params)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({}, params)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"code": 1}, params)


def test_openai_and_anthropic_shapes():
    o = openai_tool()
    assert o["type"] == "function" and o["function"] == TOOL_DEFINITION
    a = anthropic_tool()
    assert set(a) == {"name", "description", "input_schema"}
    assert a["input_schema"] == TOOL_DEFINITION["parameters"] and a["name"] == "run_python"
    # Copies: editing them leaves the definition alone.
    a["input_schema"]["properties"]["code"]["type"] = "number"
    assert TOOL_DEFINITION["parameters"]["properties"]["code"]["type"] == "string"


def test_plot_cell_gives_text_and_an_image_part(sandbox):
    out = handle_tool_call(sandbox, {"code": (
        "import matplotlib.pyplot as plt\n"
        "print('plotting 3 points')\n"
        "plt.plot([1, 2, 3], [2, 4, 1])\n"
        "plt.savefig('tool_chart.png')\n"
        "plt.show()\n"
        "sum([2, 4, 1])")})
    json.dumps(out)   # JSON-serialisable as a whole
    assert out["is_error"] is False and out["status"] == "ok"
    assert "plotting 3 points" in out["text"] and "7" in out["text"]
    assert "[image 1 attached: image/png]" in out["text"]
    assert len(out["images"]) == 1
    img = out["images"][0]
    assert img["type"] == "image" and img["media_type"] == "image/png"
    assert base64.b64decode(img["data"]).startswith(PNG_MAGIC)
    assert [f["path"] for f in out["files"]] == ["tool_chart.png"]
    assert out["files"][0]["url"].endswith("/files/tool_chart.png") and out["files"][0]["url"] in out["text"]
    parts = content_parts(out)
    assert parts[0] == {"type": "text", "text": out["text"]} and parts[1] == img

    block = anthropic_tool_result("toolu_1", out)
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_1" and block["is_error"] is False
    assert block["content"][1]["source"] == {"type": "base64", "media_type": "image/png", "data": img["data"]}
    msgs = openai_tool_messages("call_1", out)
    assert msgs[0] == {"role": "tool", "tool_call_id": "call_1", "content": out["text"]}
    assert msgs[1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_error_cell_gives_a_useful_message(sandbox):
    out = handle_tool_call(sandbox, json.dumps({"code": "values = [1, 2]\nprint(valeus[0])"}))
    assert out["is_error"] is True and out["status"] == "error"
    assert "NameError" in out["text"] and "valeus" in out["text"]
    assert "\x1b[" not in out["text"]
    assert len(out["text"]) < 3000
    assert out["images"] == []


def test_bad_arguments_and_images_are_capped(sandbox):
    out = handle_tool_call(sandbox, "{not json")
    assert out["is_error"] and out["status"] == "invalid_arguments" and "code" in out["text"]
    assert handle_tool_call(sandbox, {"source": "1"})["status"] == "invalid_arguments"

    many = handle_tool_call(sandbox, {"code": (
        "import matplotlib.pyplot as plt\n"
        "for i in range(6):\n"
        "    plt.figure(); plt.plot([0, i]); plt.show()")}, max_images=4)
    assert len(many["images"]) == 4 and "not attached" in many["text"]
    small = handle_tool_call(sandbox, {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"},
                             max_image_bytes=100)
    assert small["images"] == [] and "over" in small["text"]


def test_timeout_and_long_output_are_reported(gateway):
    with Sandbox(gateway.url, gateway.token) as sb:
        out = handle_tool_call(sb, {"code": "import time; time.sleep(30)"}, timeout=2)
        assert out["is_error"] and out["status"] == "timeout" and "timed out" in out["text"]
        long = handle_tool_call(sb, {"code": "print('y' * 100_000)"}, max_text_chars=2_000)
        assert long["is_error"] is False and len(long["text"]) < 2_200 and "characters omitted" in long["text"]


def test_pseudo_agent_loop(sandbox):
    """The README's agent loop with a scripted stand-in for the model."""
    scripted = iter([
        {"type": "tool_use", "id": "t1", "name": "run_python", "input": {"code": "data = [3, 1, 2]\nsorted(data)"}},
        {"type": "tool_use", "id": "t2", "name": "run_python", "input": {"code": "max(data) - min(data)"}},
        {"type": "text", "text": "The range is 2."},
    ])
    messages = [{"role": "user", "content": "What is the range of [3, 1, 2]?"}]
    tools = [anthropic_tool()]
    assert tools
    while True:
        reply = next(scripted)   # a real loop calls the model with messages and tools here
        messages.append({"role": "assistant", "content": [reply]})
        if reply["type"] != "tool_use":
            break
        out = handle_tool_call(sandbox, reply["input"])
        messages.append({"role": "user", "content": [anthropic_tool_result(reply["id"], out)]})
    results = [m["content"][0]["content"][0]["text"] for m in messages if m["role"] == "user"
               and isinstance(m["content"], list)]
    assert "[1, 2, 3]" in results[0] and results[1].endswith(": 2")
    json.dumps(messages)
