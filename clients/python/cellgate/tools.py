"""An LLM "run code" tool backed by a cellgate Sandbox.

    from cellgate import Sandbox
    from cellgate.tools import anthropic_tool, handle_tool_call, anthropic_tool_result

    tools = [anthropic_tool()]                     # or [openai_tool()]
    with Sandbox() as sb:
        ...                                        # the model asks for run_python(code=...)
        out = handle_tool_call(sb, tool_use.input) # {"text", "images", "files", "is_error", "status"}
        messages.append({"role": "user", "content": [anthropic_tool_result(tool_use.id, out)]})

``handle_tool_call`` never raises for the code's own failures (exceptions,
timeouts) or the gateway's: it reports them to the model in ``text`` with
``is_error`` set, which is what a model needs to fix its code.
"""
import copy
import json

from .errors import CellgateError

TOOL_NAME = "run_python"

TOOL_DEFINITION = {
    "name": TOOL_NAME,
    "description": (
        "Run Python code in a stateful, sandboxed Jupyter kernel and get back its output. "
        "Variables, imports and files persist between calls. Available: pandas, numpy, matplotlib, "
        "seaborn, scipy, scikit-learn, openpyxl, Pillow. The working directory is /workspace: uploaded "
        "files are there, and files you write there are returned to the user as links. "
        "There is no internet access. The value of the last expression is returned (like a notebook "
        "cell); use print() for anything else. Matplotlib figures shown with plt.show() are returned "
        "as images. Each call has a time limit; long computations are interrupted."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "The Python code to run, as one notebook cell.",
            },
        },
        "required": ["code"],
        "additionalProperties": False,
    },
}

MAX_IMAGES = 4
MAX_IMAGE_BYTES = 3_500_000     # decoded; base64 grows it by a third (Anthropic caps 5 MB)
MAX_TEXT_CHARS = 20_000
MAX_TRACEBACK_LINES = 12
IMAGE_TYPES = ("image/png", "image/jpeg")


def openai_tool():
    """The definition in OpenAI's Chat Completions ``tools`` shape."""
    return {"type": "function", "function": copy.deepcopy(TOOL_DEFINITION)}


def anthropic_tool():
    """The definition in Anthropic's Messages API ``tools`` shape."""
    d = copy.deepcopy(TOOL_DEFINITION)
    return {"name": d["name"], "description": d["description"], "input_schema": d["parameters"]}


def _clip(text, limit):
    """Keeps the head and the tail of a long text, saying how much went."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n… [{len(text) - head - tail} characters omitted] …\n{text[-tail:]}"


def _short_traceback(error, max_lines=MAX_TRACEBACK_LINES):
    lines = [ln for ln in (error.traceback_text or "").splitlines() if ln.strip()]
    if len(lines) > max_lines:
        lines = ["…"] + lines[-max_lines:]
    return "\n".join(lines)


def _size(n):
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _parse_arguments(arguments):
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None, "the arguments are not valid JSON: expected {\"code\": \"...\"}"
    if not isinstance(arguments, dict) or not isinstance(arguments.get("code"), str):
        return None, "missing argument 'code' (a string of Python code)"
    return arguments["code"], None


def _result(text, images=(), files=(), is_error=False, status=None):
    return {"text": text, "images": list(images), "files": list(files), "is_error": is_error, "status": status}


def handle_tool_call(sandbox, arguments, *, timeout=None, max_images=MAX_IMAGES, max_image_bytes=MAX_IMAGE_BYTES,
                     max_text_chars=MAX_TEXT_CHARS):
    """Runs a ``run_python`` call in ``sandbox`` and returns a JSON-serialisable dict:

    - ``text``: what the model reads (output, the cell's value, the error with
      a short traceback, the files written with their URLs);
    - ``images``: ``[{"type": "image", "media_type": "image/png", "data": <base64>}]``,
      at most ``max_images``, each at most ``max_image_bytes`` (decoded);
    - ``files``: ``[{"path", "size", "mime_type", "url"}]`` written by the code;
    - ``is_error``: the code raised, timed out or could not run; ``status``: the
      execution status ('ok', 'error', 'timeout', …, or 'invalid_arguments' /
      'sandbox_error').

    ``arguments`` is the call's input: a dict or a JSON string (as OpenAI sends it).
    """
    code, problem = _parse_arguments(arguments)
    if problem:
        return _result(f"Error: {problem}", is_error=True, status="invalid_arguments")
    try:
        ex = sandbox.run_code(code, timeout=timeout)
    except CellgateError as e:
        return _result(f"Error: the sandbox could not run the code ({e}).", is_error=True, status="sandbox_error")

    sections, images, omitted = [], [], []
    if ex.logs.stdout:
        sections.append(ex.logs.stdout.rstrip("\n"))
    if ex.logs.stderr:
        sections.append("[stderr]\n" + ex.logs.stderr.rstrip("\n"))
    for r in ex.results:
        image_type = next((t for t in IMAGE_TYPES if t in r.data), None)
        if image_type:
            raw = r.png if image_type == "image/png" else r.jpeg
            if len(images) >= max_images:
                omitted.append(f"{image_type} (more than {max_images} images)")
            elif len(raw) > max_image_bytes:
                omitted.append(f"{image_type} of {_size(len(raw))} (over {_size(max_image_bytes)})")
            else:
                images.append({"type": "image", "media_type": image_type, "data": r.data[image_type]})
                sections.append(f"[image {len(images)} attached: {image_type}]")
            continue
        text = r.text if r.text is not None else r.markdown or ("[SVG image]" if r.svg else None)
        if text is None:
            text = f"[output in {', '.join(r.formats())}]"
        sections.append(f"Out[{ex.execution_count}]: {text}" if r.is_main_result else text)
    if omitted:
        sections.append("[not attached: " + "; ".join(omitted) + "]")
    if ex.truncated:
        sections.append("[output truncated: the sandbox's output limit was reached]")
    if ex.error:
        sections.append(f"Error: {ex.error.name}: {ex.error.value}\n{_short_traceback(ex.error)}".rstrip())
    if ex.status == "timeout":
        lost = " The kernel was restarted: variables were lost, files were kept." if ex.kernel_restarted else ""
        sections.append(f"Error: the code timed out and was interrupted.{lost}")
    elif ex.status == "kernel_died":
        sections.append("Error: the kernel died (out of memory?); variables were lost, files were kept.")
    elif ex.status == "interrupted":
        sections.append("Error: the execution was interrupted.")
    files = [{"path": f.path, "size": f.size, "mime_type": f.mime_type, "url": f.url}
             for f in ex.files if f.change != "deleted"]
    if files:
        sections.append("Files written:\n" + "\n".join(
            f"- {f['path']} ({_size(f['size'])}, {f['mime_type']}): {f['url']}" for f in files))
    text = _clip("\n".join(sections), max_text_chars) if sections else "(no output)"
    return _result(text, images, files, is_error=ex.status != "ok", status=ex.status)


def content_parts(result):
    """The result as generic content parts: one text part, then the image parts."""
    return [{"type": "text", "text": result["text"]}] + list(result["images"])


def anthropic_tool_result(tool_use_id, result):
    """A ``tool_result`` block for Anthropic's Messages API (images inline)."""
    content = [{"type": "text", "text": result["text"]}]
    content += [{"type": "image", "source": {"type": "base64", "media_type": i["media_type"], "data": i["data"]}}
                for i in result["images"]]
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": result["is_error"]}


def openai_tool_messages(tool_call_id, result):
    """Messages for OpenAI's Chat Completions: the ``tool`` message (text
    only, as the API requires) and, when there are images, a ``user``
    message carrying them as data URLs."""
    messages = [{"role": "tool", "tool_call_id": tool_call_id, "content": result["text"]}]
    if result["images"]:
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"Images produced by the {TOOL_NAME} call {tool_call_id}:"}] + [
            {"type": "image_url", "image_url": {"url": f"data:{i['media_type']};base64,{i['data']}"}}
            for i in result["images"]]})
    return messages
