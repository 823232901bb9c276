"""Drives the chat page (clients/web, served at / by the gateway) in Debian's
Chromium with playwright-core, against the REAL cellgate gateway: built
binary, runc sandboxes, the built kernel image. The checks are in
chat.test.mjs, xss.test.mjs and network.test.mjs (Node's built-in test
runner); the network panel's gateway leads allowed.test and denied.test to a
listener on 127.0.0.1 (--egress-resolve), and nowhere else.

The gateway serves its compiled-in copy of the page, so this tests what
ships (a separate check says whether that copy still matches clients/).
The XSS suite runs twice: on a default gateway, and on one started with
--output-scripts true.

Needs root, runc, build/bin/cellgate, the kernel image, Node.js ≥ 20, npm
and /usr/bin/chromium. Without them the tests are skipped, unless
CELLGATE_REQUIRE_SANDBOX=1 (CI), where they fail instead. Nothing here
downloads a browser: `npm ci --ignore-scripts` with the download switches off.

CELLGATE_SCREENSHOT_DIR=docs writes docs/screenshot-chat.png and
docs/screenshot-chat-phone.png (default: a temporary folder).
CELLGATE_WEB_STATIC_DIR=/path/to/clients (development only) serves the page
from disk instead of the compiled-in copy.
"""
import os
import subprocess
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from support.gateway import Gateway, HttpListener
from support.prerequisites import gateway_missing, node_missing, node_test, npm_ci, require

CHROMIUM = Path(os.environ.get("CELLGATE_CHROMIUM", "/usr/bin/chromium"))
WEB = REPO / "clients" / "web"

# Nothing may fetch a browser: no install scripts run at all, and the usual
# download switches are off in case a future dependency grows one.
NO_DOWNLOADS = {
    "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
    "PUPPETEER_SKIP_DOWNLOAD": "1",
    "PUPPETEER_SKIP_CHROMIUM_DOWNLOAD": "1",
    "npm_config_update_notifier": "false",
}


def _require():
    why = gateway_missing() or node_missing("npm")
    if why is None and not os.access(CHROMIUM, os.X_OK):
        why = f"{CHROMIUM} is not installed (apt-get install chromium)"
    require("browser tests", why)


def _log_tail(gw, chars=6000):
    return gw.log_text()[-chars:]


@pytest.fixture(scope="module")
def node_modules():
    """Installs the locked packages with `npm ci` unless node_modules matches the lock."""
    _require()
    npm_ci(HERE, "playwright-core", NO_DOWNLOADS)


def _start(*args):
    static = os.environ.get("CELLGATE_WEB_STATIC_DIR")
    gw = Gateway(*(["--static-dir", static] if static else []), *args)
    gw.start()
    return gw


@pytest.fixture(scope="module")
def gateway():
    _require()
    gw = _start()
    try:
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


@pytest.fixture(scope="module")
def gateway_output_scripts():
    _require()
    gw = _start("--output-scripts", "true")
    try:
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


@pytest.fixture(scope="module")
def gateway_egress():
    """A gateway whose egress proxy leads allowed.test and denied.test to a
    listener on 127.0.0.1 (answering 'upstream <path>')."""
    _require()
    upstream = HttpListener()
    gw = _start(*upstream.resolve_args("allowed.test", "denied.test"))
    try:
        yield gw
    finally:
        gw.stop()
        gw.cleanup()
        upstream.close()


def _run_node(gw, test_file, output_scripts=False, screenshots=None, timeout=900):
    env = {**os.environ, **NO_DOWNLOADS, "CELLGATE_URL": gw.url, "CELLGATE_TOKEN": gw.token,
           "CELLGATE_OUTPUT_SCRIPTS": "1" if output_scripts else "0", "CELLGATE_CHROMIUM": str(CHROMIUM),
           "NODE_NO_WARNINGS": "1"}
    if screenshots:
        env["CELLGATE_SCREENSHOT_DIR"] = str(screenshots)
    try:
        r = subprocess.run(node_test(test_file), cwd=HERE, env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"node --test {test_file} timed out\n{e.stdout or ''}\n{e.stderr or ''}\n"
                    f"--- gateway log ---\n{_log_tail(gw)}")
    print(r.stdout)
    assert r.returncode == 0, (f"node --test {test_file} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
                               f"--- gateway log (tail) ---\n{_log_tail(gw)}")
    assert "ℹ fail 0" in r.stdout and "ℹ pass 0" not in r.stdout and "ℹ skipped 0" in r.stdout, r.stdout
    left = gw.api("GET", "/v1/sessions").json()["sessions"]
    assert left == [], f"sessions left behind: {[s['id'] for s in left]}"


def test_served_page_matches_the_source(gateway):
    """/ and /static/<name> are clients/web/ byte for byte (else the binary is
    stale: rebuild it); the page's CSP forbids inline script."""
    r = requests.get(gateway.url + "/", timeout=30)
    assert r.status_code == 200
    assert r.content == (WEB / "index.html").read_bytes(), "/ differs from clients/web/index.html: rebuild the gateway"
    assert "script-src 'self';" in r.headers["Content-Security-Policy"]
    names = sorted(p.name for p in WEB.iterdir() if p.suffix in (".html", ".css", ".js", ".svg"))
    assert {"index.html", "app.js", "render.js", "style.css"} <= set(names)
    for name in names:
        r = requests.get(f"{gateway.url}/static/{name}", timeout=30)
        assert r.status_code == 200, f"/static/{name}: {r.status_code}"
        assert r.content == (WEB / name).read_bytes(), f"/static/{name} differs from clients/web/{name}: rebuild the gateway"
    assert requests.get(f"{gateway.url}/static-config.json", timeout=30).json() == {"output_scripts": False}


def test_page_has_no_inline_script_or_external_resources():
    """What the CSP would refuse anyway, checked at the source: no inline
    <script>, no on* attributes, no CDN or external fonts, no innerHTML."""
    import re
    html = (WEB / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag, f"inline script: {tag}"
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler"
    for f in WEB.iterdir():
        if f.suffix in (".html", ".css", ".js"):
            text = f.read_text()
            assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), f"{f.name} loads something external"
            assert "@import" not in text and "url(http" not in text, f"{f.name} loads something external"
            if f.suffix == ".js":
                assert not re.search(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write", text), \
                    f"{f.name} writes HTML"


def test_chat_page(gateway, node_modules, tmp_path):
    shots = Path(os.environ.get("CELLGATE_SCREENSHOT_DIR") or tmp_path)
    _run_node(gateway, "chat.test.mjs", screenshots=shots)
    for name in ("screenshot-chat.png", "screenshot-chat-phone.png"):
        png = (shots / name).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000, name


def test_hostile_output(gateway, node_modules):
    _run_node(gateway, "xss.test.mjs")


def test_hostile_output_with_output_scripts(gateway_output_scripts, node_modules):
    r = requests.get(f"{gateway_output_scripts.url}/static-config.json", timeout=30)
    assert r.json() == {"output_scripts": True}
    _run_node(gateway_output_scripts, "xss.test.mjs", output_scripts=True)


def test_network_panel(gateway_egress, node_modules):
    _run_node(gateway_egress, "network.test.mjs")


def test_markdown_renderer_in_node():
    """render.test.mjs: code spans and bold from the linear scanner (review
    L8), against a stand-in DOM; needs Node only."""
    require("the Markdown renderer's tests", node_missing())
    r = subprocess.run(node_test("render.test.mjs"), cwd=HERE,
                       env={**os.environ, "NODE_NO_WARNINGS": "1"}, capture_output=True, text=True, timeout=300)
    print(r.stdout)
    assert r.returncode == 0, f"node --test render.test.mjs failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    assert "ℹ fail 0" in r.stdout and "ℹ pass 0" not in r.stdout, r.stdout
