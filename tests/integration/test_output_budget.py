"""Output sized for a model: an execution with max_output_tokens (or
max_output_bytes) keeps head and tail of its text around a marker, within
the budget; the whole output pages back from its handle; a DataFrame
becomes a summary; a large plot is downscaled by the kernel with the
original downloadable; repeated traceback frames collapse; without a
budget nothing changes. Real gateway, runc sandboxes, the kernel image."""
import base64
import struct

import pytest
import requests

from support.gateway import Gateway


def api(g, method, path, **kw):
    return requests.request(method, g.url + path, headers=g.headers, timeout=180, **kw)


def run(g, sid, code, **budget):
    r = api(g, "POST", f"/v1/sessions/{sid}/execute", json={"code": code, "timeout_s": 120, **budget})
    assert r.status_code == 200, r.text
    return r.json()


def png_size(b64):
    data = base64.b64decode(b64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def gw():
    g = Gateway("--max-kernels", "4").start()
    yield g
    g.stop()
    g.cleanup()


@pytest.fixture(scope="module")
def sid(gw):
    return api(gw, "POST", "/v1/sessions", json={}).json()["id"]


def text_bytes(result):
    n = len(result["stdout"].encode()) + len(result["stderr"].encode())
    if result["error"]:
        n += len(result["error"]["traceback_text"].encode())
    for r in result["results"]:
        for mime in ("text/plain", "text/markdown"):
            n += len(r["data"].get(mime, "").encode())
    return n


def test_a_5_mb_print_fits_2000_tokens_and_pages_back_every_byte(gw, sid):
    code = "import sys\nfor i in range(500000): print('row', i)\nprint('a warning', file=sys.stderr)"
    expected = "".join(f"row {i}\n" for i in range(500000)).encode()
    assert len(expected) > 5_000_000
    r = run(gw, sid, code, max_output_tokens=2000)
    assert r["status"] == "ok"
    b = r["budget"]
    assert b["max_output_bytes"] == 8000 and b["bytes_per_token"] == 4
    assert text_bytes(r) <= 8000 and b["estimated_tokens"] <= 2000, (text_bytes(r), b)
    assert r["stdout"].startswith("row 0\nrow 1\n") and r["stdout"].endswith("row 499999\n")
    assert " lines) elided; all of it: GET " in r["stdout"]
    assert r["stderr"] == "a warning\n", "a small part keeps all of its share"
    assert b["elided_streams"] == {"stdout": len(expected)} and b["output_complete"] is True
    # The handle pages back every byte, whatever the page size.
    got, offset = b"", 0
    while offset is not None:
        page = api(gw, "GET", b["output_url"], params={"stream": "stdout", "offset": offset, "limit": 700001}).json()
        assert page["total_bytes"] == len(expected)
        got += page["data"].encode()
        offset = page["next_offset"]
    assert got == expected
    err = api(gw, "GET", b["output_url"], params={"stream": "stderr"}).json()
    assert err["data"] == "a warning\n" and err["next_offset"] is None
    assert r["usage"]["stdout_bytes"] == len(expected)
    assert api(gw, "GET", b["output_url"], params={"stream": "stdin"}).status_code == 400
    assert api(gw, "GET", b["output_url"], params={"offset": "x"}).status_code == 400


def test_a_100k_row_dataframe_becomes_a_summary(gw, sid):
    code = ("import pandas as pd, numpy as np\n"
            "df = pd.DataFrame({'id': np.arange(100000), 'score': np.linspace(0, 1, 100000), 'tag': ['t'] * 100000})\n"
            "df")
    r = run(gw, sid, code, max_output_tokens=1000)
    data = r["results"][0]["data"]
    assert list(data) == ["text/plain"], data.keys()
    text = data["text/plain"]
    assert text.startswith("DataFrame: 100000 rows × 3 columns\n"), text
    assert "id (int64)" in text and "score (float64)" in text and "tag (object)" in text
    assert "first rows:" in text and "99999" not in text
    assert r["results"][0]["metadata"]["cellgate"] == {"summary": "table"}
    assert r["budget"]["tables_summarized"] == 1
    series = run(gw, sid, "df['score']", max_output_tokens=1000)["results"][0]["data"]["text/plain"]
    assert series.startswith("Series: 100000 rows\n"), series


def test_a_4000_px_plot_is_downscaled_and_the_original_kept(gw, sid):
    # No tight bounding box: the figure is exactly 4000 × 4000 pixels.
    code = ("%config InlineBackend.print_figure_kwargs = {'bbox_inches': None}\n"
            "import matplotlib.pyplot as plt\n"
            "fig = plt.figure(figsize=(40, 40), dpi=100)\nplt.plot([1, 2, 3])\nplt.show()")
    r = run(gw, sid, code, max_output_tokens=2000)
    assert r["status"] == "ok" and r["budget"]["images_downscaled"] == 1
    result = next(x for x in r["results"] if "image/png" in x["data"])
    w, h = png_size(result["data"]["image/png"])
    assert w * h <= 1 << 20 and w > 500, (w, h)
    meta = result["metadata"]["cellgate"]
    ow, oh = meta["downscaled_from"]
    assert (ow, oh) == (4000, 4000) and [w, h] == meta["size"] and w == h
    original = api(gw, "GET", meta["original_url"])
    assert original.status_code == 200 and original.headers["Content-Type"] == "image/png"
    assert png_size(base64.b64encode(original.content).decode()) == (ow, oh)
    # A smaller pixel budget, asked for.
    small = run(gw, sid, code, max_output_tokens=2000, max_image_pixels=65536)
    img = next(x for x in small["results"] if "image/png" in x["data"])["data"]["image/png"]
    sw, shh = png_size(img)
    assert sw * shh <= 65536


def test_repeated_traceback_frames_collapse(gw, sid):
    code = "def f(n):\n    return f(n + 1)\nf(0)"
    r = run(gw, sid, code, max_output_tokens=500)
    assert r["status"] == "error" and r["error"]["ename"] == "RecursionError"
    tb = r["error"]["traceback_text"]
    assert len(tb.encode()) <= 2000, len(tb)
    assert "RecursionError" in tb and ("repeated" in tb or "skipping similar frames" in tb), tb


def test_a_one_shot_execution_takes_a_budget_too(gw):
    r = api(gw, "POST", "/v1/execute", json={"code": "for i in range(100000): print(i)", "max_output_tokens": 300})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["stdout"].startswith("0\n1\n") and out["stdout"].endswith("99999\n")
    assert " lines) elided …" in out["stdout"] and out["budget"]["output_url"] is None


def test_without_a_budget_nothing_changes(gw, sid):
    r = run(gw, sid, "for i in range(3000): print('x' * 50)\ndf.head(3)")
    assert "budget" not in r
    assert r["stdout"] == ("x" * 50 + "\n") * 3000
    data = r["results"][0]["data"]
    assert "text/html" in data and "text/plain" in data
    assert not any(k.startswith("application/vnd.cellgate") for k in data)
    page = api(gw, "GET", f"/v1/sessions/{sid}/executions/{r['execution_id']}/output")
    assert page.status_code == 404 and "max_output_tokens" in page.json()["message"]


def test_bad_budgets_are_refused(gw, sid):
    for body in ({"max_output_tokens": 10}, {"max_output_tokens": 100, "max_output_bytes": 1000},
                 {"max_output_tokens": "many"}, {"max_image_pixels": 10}):
        r = api(gw, "POST", f"/v1/sessions/{sid}/execute", json={"code": "1", **body})
        assert r.status_code == 400, (body, r.text)


def test_a_kernel_that_forges_the_summary_type_cannot_hurt_the_gateway(gw, sid):
    """The table MIME type and the metadata come from the kernel: garbage in
    them is dropped, not trusted, and the gateway keeps serving."""
    # Straight onto iopub, past IPython's own checks, as hostile code can.
    code = ("k = get_ipython().kernel\n"
            "parent = k.get_parent('shell')\n"
            "for data, meta in (({'application/vnd.cellgate.table+json': 'garbage', 'text/plain': 'plain'}, [1, 2]),\n"
            "                   ({'application/vnd.cellgate.table+json': {'kind': 7, 'shape': 'x', 'head': [1]},\n"
            "                     'text/plain': 'forged'}, 'meta')):\n"
            "    k.session.send(k.iopub_socket, 'display_data', {'data': data, 'metadata': meta, 'transient': {}},\n"
            "                   parent=parent, ident=b'display_data')")
    for budget in ({"max_output_tokens": 500}, {}):
        r = run(gw, sid, code, **budget)
        assert r["status"] == "ok", r
        kinds = [list(x["data"]) for x in r["results"]]
        assert len(kinds) == 2 and all(k == ["text/plain"] for k in kinds), kinds
    assert run(gw, sid, "1 + 1")["results"][0]["data"]["text/plain"] == "2"
