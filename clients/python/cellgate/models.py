"""What an execution returns: results (MIME bundles), logs, the error, the
files it wrote. Each object keeps the gateway's JSON in ``.raw``."""
import base64
import json


def _b64(value):
    return base64.b64decode(value) if isinstance(value, str) else value


class Result:
    """One rich output: a ``display_data`` or the cell's value (``execute_result``).

    ``data`` is the MIME bundle as the gateway sent it (images base64). The
    properties give each format decoded: ``png``/``jpeg`` are bytes.
    """

    def __init__(self, data, metadata=None, is_main_result=False, type=None, execution_count=None):
        self.data = dict(data or {})
        self.metadata = dict(metadata or {})
        self.is_main_result = bool(is_main_result)
        self.type = type or ("execute_result" if is_main_result else "display_data")
        self.execution_count = execution_count

    @classmethod
    def from_json(cls, obj):
        return cls(obj.get("data"), obj.get("metadata"), obj.get("is_main_result", False), obj.get("type"),
                   obj.get("execution_count"))

    @property
    def text(self):
        return self.data.get("text/plain")

    @property
    def html(self):
        return self.data.get("text/html")

    @property
    def markdown(self):
        return self.data.get("text/markdown")

    @property
    def latex(self):
        return self.data.get("text/latex")

    @property
    def svg(self):
        return self.data.get("image/svg+xml")

    @property
    def png(self):
        return _b64(self.data.get("image/png"))

    @property
    def jpeg(self):
        return _b64(self.data.get("image/jpeg"))

    @property
    def json(self):
        value = self.data.get("application/json")
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

    def formats(self):
        """The MIME types this result carries."""
        return list(self.data)

    # IPython's display protocol, so a Result shows itself in a notebook.
    def _repr_html_(self):
        return self.html

    def _repr_markdown_(self):
        return self.markdown

    def _repr_latex_(self):
        return self.latex

    def _repr_svg_(self):
        return self.svg

    def _repr_png_(self):
        return self.png

    def _repr_jpeg_(self):
        return self.jpeg

    def _repr_json_(self):
        return self.json

    def __repr__(self):
        kind = "main result" if self.is_main_result else "display"
        return f"<Result {kind} {self.formats()}>"

    def __str__(self):
        return self.text or ""


class Logs:
    def __init__(self, stdout="", stderr=""):
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self):
        return f"Logs(stdout={self.stdout!r}, stderr={self.stderr!r})"


class ExecutionError:
    """An exception raised by the code: ``name``, ``value``, ``traceback``
    (lines with ANSI colours, as Jupyter sends them) and ``traceback_text``
    (one plain string)."""

    def __init__(self, name, value, traceback=None, traceback_text=None):
        self.name = name
        self.value = value
        self.traceback = list(traceback or [])
        self.traceback_text = traceback_text if traceback_text is not None else "\n".join(self.traceback)

    @classmethod
    def from_json(cls, obj):
        return cls(obj.get("ename", ""), obj.get("evalue", ""), obj.get("traceback"), obj.get("traceback_text"))

    def to_json(self):
        return {"ename": self.name, "evalue": self.value, "traceback": self.traceback,
                "traceback_text": self.traceback_text}

    def __repr__(self):
        return f"ExecutionError({self.name}: {self.value})"

    def __str__(self):
        return f"{self.name}: {self.value}"


class FileInfo:
    """A file in the session's workspace. ``url`` is absolute (the gateway's
    relative URL joined to the client's base URL; it needs the token).
    ``change`` ('created', 'modified', …) is set on files an execution
    produced; ``content`` holds the bytes when a one-shot call inlined them."""

    def __init__(self, path, size=None, mime_type=None, url=None, change=None, name=None, type="file",
                 modified=None, content=None, raw=None):
        self.path = path
        self.size = size
        self.mime_type = mime_type
        self.url = url
        self.change = change
        self.name = name if name is not None else path.rsplit("/", 1)[-1]
        self.type = type
        self.modified = modified
        self.content = content
        self.raw = raw or {}

    @classmethod
    def from_json(cls, obj, client=None):
        url = obj.get("url")
        if client is not None:
            url = client.absolute(url)
        content = obj.get("content_base64")
        return cls(obj.get("path", ""), obj.get("size"), obj.get("mime_type"), url, obj.get("change"),
                   obj.get("name"), obj.get("type", "file"), obj.get("modified"),
                   base64.b64decode(content) if content is not None else None, obj)

    @property
    def is_dir(self):
        return self.type == "directory"

    def __repr__(self):
        extra = f" {self.change}" if self.change else ""
        return f"<FileInfo {self.path} {self.size} B {self.mime_type}{extra}>"


class Truncated:
    """Which parts of an execution's output hit the output limit; truthy if any did."""

    def __init__(self, flags=None):
        flags = flags or {}
        self.stdout = bool(flags.get("stdout"))
        self.stderr = bool(flags.get("stderr"))
        self.results = bool(flags.get("results"))
        self.files = bool(flags.get("files"))

    def __bool__(self):
        return self.stdout or self.stderr or self.results or self.files

    def __repr__(self):
        return (f"Truncated(stdout={self.stdout}, stderr={self.stderr}, results={self.results}, "
                f"files={self.files})")


class Usage:
    """A cell's record in the session's ledger: what it cost and touched.
    ``cpu_s`` (CPU seconds of the sandbox during the cell) and
    ``peak_memory_bytes`` (the sandbox's memory peak during it) are None
    where the runtime cannot measure them; ``peak_memory_increase_bytes`` is
    that peak above the use at the cell's start. ``files`` holds the
    ``created``, ``modified`` and ``deleted`` paths with their sizes."""

    def __init__(self, raw):
        self.raw = raw or {}
        r = self.raw
        self.execution_id = r.get("execution_id")
        self.session_id = r.get("session_id")
        self.seq = r.get("seq")
        self.code_sha256 = r.get("code_sha256")
        self.started_at = r.get("started_at")
        self.ended_at = r.get("ended_at")
        self.wall_ms = r.get("wall_ms")
        self.status = r.get("status")
        self.cpu_s = r.get("cpu_s")
        self.peak_memory_bytes = r.get("peak_memory_bytes")
        self.peak_memory_increase_bytes = r.get("peak_memory_increase_bytes")
        self.stdout_bytes = r.get("stdout_bytes")
        self.stderr_bytes = r.get("stderr_bytes")
        self.result_bytes = r.get("result_bytes")
        self.files = r.get("files") or {"created": [], "modified": [], "deleted": []}

    def __repr__(self):
        return (f"<Usage {self.status} cpu_s={self.cpu_s} peak_memory_bytes={self.peak_memory_bytes} "
                f"wall_ms={self.wall_ms}>")


class NetworkPolicy:
    """A session's network (egress) policy, docs/egress.md. ``enabled`` is
    False for a session created without one: its sandbox reaches nothing.
    ``allow``, ``deny`` and ``presets`` are the session's own lists; the
    kernelspec's and the tenant's layers apply too and are not shown here."""

    def __init__(self, raw):
        self.raw = raw or {}
        self.enabled = bool(self.raw.get("enabled"))
        self.allow = list(self.raw.get("allow") or [])
        self.deny = list(self.raw.get("deny") or [])
        self.presets = list(self.raw.get("presets") or [])

    def __repr__(self):
        if not self.enabled:
            return "<NetworkPolicy disabled>"
        return f"<NetworkPolicy allow={self.allow} deny={self.deny} presets={self.presets}>"


class NetworkConnection:
    """One attempt of the session's code to reach the network, from its
    egress log: ``host`` and ``port`` as the code asked, ``verdict``
    ('allowed' or 'refused'), the ``rule`` that decided (if one did),
    ``reason`` (why it was refused, or how it ended), ``address`` the name
    led to, ``bytes_up`` / ``bytes_down``, ``time_ms`` (Unix ms),
    ``duration_ms``, ``credential_injected`` and ``tls_terminated`` (the
    proxy ended the TLS itself, docs/egress.md)."""

    def __init__(self, raw):
        self.raw = raw or {}
        r = self.raw
        self.seq = r.get("seq")
        self.time_ms = r.get("time_ms")
        self.duration_ms = r.get("duration_ms")
        self.method = r.get("method")
        self.host = r.get("host")
        self.port = r.get("port")
        self.address = r.get("address")
        self.bytes_up = r.get("bytes_up")
        self.bytes_down = r.get("bytes_down")
        self.verdict = r.get("verdict")
        self.rule = r.get("rule")
        self.reason = r.get("reason")
        self.credential_injected = bool(r.get("credential_injected"))
        self.tls_terminated = bool(r.get("tls_terminated"))

    @property
    def allowed(self):
        return self.verdict == "allowed"

    def __repr__(self):
        why = f" ({self.reason})" if self.reason else ""
        return f"<NetworkConnection #{self.seq} {self.host}:{self.port} {self.verdict}{why}>"


class Execution:
    """The outcome of one cell. ``status`` is ok | error | timeout |
    interrupted | kernel_died."""

    def __init__(self, raw, client=None):
        self.raw = raw
        self.status = raw.get("status")
        self.execution_count = raw.get("execution_count")
        self.logs = Logs(raw.get("stdout") or "", raw.get("stderr") or "")
        self.results = [Result.from_json(r) for r in raw.get("results") or []]
        self.error = ExecutionError.from_json(raw["error"]) if raw.get("error") else None
        self.files = [FileInfo.from_json(f, client) for f in raw.get("files") or []]
        self.duration_ms = raw.get("duration_ms")
        self.truncated = Truncated(raw.get("truncated"))
        self.kernel_restarted = bool(raw.get("kernel_restarted"))
        self.execution_id = raw.get("execution_id")
        self.usage = Usage(raw.get("usage")) if raw.get("usage") else None

    @property
    def ok(self):
        return self.status == "ok"

    @property
    def main_result(self):
        return next((r for r in self.results if r.is_main_result), None)

    @property
    def text(self):
        """The cell value's text/plain (None when the cell has no value)."""
        main = self.main_result
        return main.text if main else None

    def __repr__(self):
        return (f"<Execution {self.status} #{self.execution_count} results={len(self.results)} "
                f"files={len(self.files)} error={self.error!r}>")


class SessionInfo:
    """The session model: id, kernel, state, timestamps and the limits that apply."""

    def __init__(self, raw):
        self.raw = raw
        self.id = raw.get("id")
        self.kernel = raw.get("kernel")
        self.state = raw.get("state")
        self.created = raw.get("created")
        self.last_activity = raw.get("last_activity")
        self.expires_at = raw.get("expires_at")
        self.limits = raw.get("limits") or {}
        # {"on_idle": "delete"|"pause", "auto_resume": bool}
        self.lifecycle = raw.get("lifecycle") or {}
        # {"paused", "mode" ("memory"|"files"), "since", "image_bytes", "resumed_from", "pauses"}
        self.pause = raw.get("pause") or {}
        # None, or {"snapshot": id, "source": session id, "mode": "files"} for a
        # session started from a snapshot (or a fork).
        self.origin = raw.get("origin")
        # The named volumes the session mounts: [{"name", "path", "read_only"}].
        self.volumes = list(raw.get("volumes") or [])

    @property
    def paused(self):
        return self.state == "paused"

    def __repr__(self):
        return f"<SessionInfo {self.id} {self.kernel} {self.state} expires {self.expires_at}>"


class Snapshot:
    """A snapshot: an immutable copy of a session's workspace, taken while it
    ran. ``session`` is the id of the session it was taken from (which may
    have ended since), ``kernel`` its kernelspec, ``created`` an ISO 8601
    time, ``mode`` what it holds ("files": the workspace, not the kernel's
    memory), ``bytes`` the files' size, ``disk_bytes`` what the copy takes on
    disk and ``reflinked`` whether it shares its blocks with the source.
    ``name`` is the name it was given, else its id."""

    def __init__(self, raw):
        self.raw = raw or {}
        r = self.raw
        self.id = r.get("id")
        self.name = r.get("name")
        self.session = r.get("session")
        self.kernel = r.get("kernel")
        self.created = r.get("created")
        self.mode = r.get("mode")
        self.bytes = r.get("bytes")
        self.disk_bytes = r.get("disk_bytes")
        self.reflinked = bool(r.get("reflinked"))

    def __repr__(self):
        return f"<Snapshot {self.id} {self.name!r} of {self.session} {self.mode} {self.bytes} B>"


class VolumeMount:
    """A named volume for ``Sandbox(volumes=[...])``: mounted at ``path``
    (``/volumes/<name>``, by default ``/volumes/<volume name>``), read-write
    unless ``read_only``. A volume has one writer at a time; read-only
    mounts are unlimited. A plain dict ``{"name", "path", "read_only"}`` works too."""

    def __init__(self, name, path=None, read_only=False):
        self.name = name
        self.path = path
        self.read_only = bool(read_only)

    def to_json(self):
        body = {"name": self.name}
        if self.path is not None:
            body["path"] = self.path
        if self.read_only:
            body["read_only"] = True
        return body

    def __repr__(self):
        return f"VolumeMount({self.name!r}, path={self.path!r}, read_only={self.read_only})"


class Volume:
    """A named volume: a size-capped file system of the tenant's that
    outlives sessions. ``size_bytes`` is its cap, ``used_bytes`` what its
    files take, ``created`` an ISO 8601 time and ``mounts`` the sessions
    that mount it now: ``[{"session", "path", "read_only"}]``."""

    def __init__(self, raw):
        self.raw = raw or {}
        r = self.raw
        self.name = r.get("name")
        self.size_bytes = r.get("size_bytes")
        self.used_bytes = r.get("used_bytes")
        self.created = r.get("created")
        self.mounts = list(r.get("mounts") or [])

    def __repr__(self):
        return f"<Volume {self.name!r} {self.used_bytes}/{self.size_bytes} B mounts={len(self.mounts)}>"
