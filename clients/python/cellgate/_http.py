"""A tiny HTTP client over http.client: bearer auth, JSON bodies, gateway
errors turned into exceptions, streamed bodies and Server-Sent Events.

One connection per request keeps it thread-safe and simple; the gateway's
calls are few and long (an execution), so reuse would buy little.
"""
import http.client
import json
import os
import socket
import ssl
import urllib.parse

from .errors import CellgateError, ConnectionFailed, NotFound, TooManySessions

USER_AGENT = "cellgate-python"
CHUNK = 64 * 1024


def quote_path(path):
    """A workspace path as URL path segments ('/workspace/' prefix tolerated)."""
    path = str(path)
    if path.startswith("/workspace/"):
        path = path[len("/workspace/"):]
    return urllib.parse.quote(path, safe="/")


class Client:
    def __init__(self, url=None, token=None, timeout=60.0):
        url = url or os.environ.get("CELLGATE_URL")
        if not url:
            raise ValueError("no gateway URL: pass url= or set CELLGATE_URL")
        token = token if token is not None else os.environ.get("CELLGATE_TOKEN")
        self.base_url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")

    def absolute(self, url):
        """The gateway's relative URLs (e.g. files[].url) made absolute."""
        return urllib.parse.urljoin(self.base_url + "/", url) if url else url

    def _connection(self, timeout):
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def open(self, method, path, *, body=None, json_body=None, headers=None, query=None,
             timeout=None, not_found=NotFound, too_many=TooManySessions):
        """Sends a request and returns the open HTTPResponse (status < 400).

        ``body`` may be bytes or a binary file object (then Content-Length
        must be in ``headers``). Raises CellgateError for error statuses.
        """
        hdrs = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        if body is None and method in ("POST", "PUT"):
            body = b""
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        conn = self._connection(self.timeout if timeout is None else timeout)
        try:
            conn.request(method, target, body=body, headers=hdrs, encode_chunked=False)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ConnectionFailed(f"{method} {self.base_url}{path}: {e}") from e
        resp._cellgate_conn = conn  # closed together with the response
        if resp.status >= 400:
            data = resp.read()
            conn.close()
            raise error_from_response(resp.status, resp.reason, data, not_found, too_many)
        return resp

    def request(self, method, path, **kw):
        """Sends a request; returns the decoded JSON body (None for an empty one)."""
        resp = self.open(method, path, **kw)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed(f"{method} {path}: reading the response: {e}") from e
        finally:
            resp._cellgate_conn.close()
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise CellgateError(resp.status, "bad_response", f"not JSON: {data[:200]!r}") from e


def close_response(resp):
    resp.close()
    resp._cellgate_conn.close()


def error_from_response(status, http_reason, data, not_found=NotFound, too_many=TooManySessions):
    reason, message = http_reason, ""
    try:
        body = json.loads(data)
        reason = body.get("reason") or reason
        message = body.get("message") or ""
    except (ValueError, AttributeError):
        message = data[:500].decode("utf-8", "replace")
    cls = CellgateError
    if status == 404:
        cls = not_found
    elif status == 429:
        cls = too_many
    return cls(status, reason, message)


def iter_sse(resp):
    """Yields (event, data) for each Server-Sent Event; comments are skipped.

    Follows the WHATWG rules that matter here: 'field: value' (one optional
    space after the colon), several data lines joined by '\\n', a blank line
    dispatches, the event name defaults to 'message'.
    """
    event, data = None, []
    while True:
        try:
            raw = resp.readline()
        except socket.timeout as e:
            raise ConnectionFailed(f"no event or keepalive for {resp._cellgate_conn.timeout} s") from e
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed(f"event stream broke: {e}") from e
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        # 'id' and 'retry' mean nothing for a one-shot stream.
