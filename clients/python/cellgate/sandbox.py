"""Sessions on a cellgate gateway: a sandboxed, stateful Python kernel with its
own /workspace, driven through the gateway's /v1 agent API."""
import base64
import collections
import io
import json
import os
import urllib.parse
import uuid

from ._http import Client, close_response, iter_sse, quote_path
from .errors import (CellgateError, NotFound, SessionNotFound, SnapshotNotFound, StreamIncomplete, TooManySnapshots,
                     TooManyVolumes, VolumeNotFound)
from .commands import Commands
from .models import (Execution, ExecutionError, FileInfo, NetworkConnection, NetworkPolicy, Result, SessionInfo,
                     Snapshot, Volume, VolumeMount)

DEFAULT_EXEC_TIMEOUT_S = 300
# Time the gateway may need beyond the execution timeout (interrupt, then a
# kernel restart) before its answer can be expected.
ANSWER_GRACE_S = 120


def _seconds(value):
    """Whole seconds go as JSON integers (the contract's examples are integers)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _entries(value):
    """A list of network entries or preset names; one string is one entry."""
    return [value] if isinstance(value, str) else list(value)


def _snapshot_id(snapshot):
    """A snapshot id, from a Snapshot or the id itself."""
    return snapshot.id if isinstance(snapshot, Snapshot) else str(snapshot)


def _volume_name(volume):
    """A volume's name, from a Volume or the name itself."""
    return volume.name if isinstance(volume, Volume) else str(volume)


def _volume_path(volume):
    return "/v1/volumes/" + urllib.parse.quote(_volume_name(volume), safe="")


def _mount(entry):
    """One entry of ``volumes=``: a VolumeMount, a dict {name, path?, read_only?},
    a Volume or a volume name (mounted read-write at /volumes/<name>)."""
    if isinstance(entry, VolumeMount):
        return entry.to_json()
    if isinstance(entry, dict):
        return dict(entry)
    if isinstance(entry, (str, Volume)):
        return {"name": _volume_name(entry)}
    raise TypeError(f"not a volume mount: {entry!r} (pass a VolumeMount, a dict or a volume name)")


def _session_not_found(from_snapshot, volumes):
    """The error class for a 404 on POST /v1/sessions: an unknown snapshot or volume."""
    def make(status, reason, message):
        if volumes and (from_snapshot is None or str(message).startswith("No such volume")):
            return VolumeNotFound(status, reason, message)
        return SnapshotNotFound(status, reason, message)
    return make


def _read_source(data):
    """(body, length, file to close) for an upload: bytes, str/PathLike (a
    local file) or a file object (binary, or text sent as UTF-8)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data)
        return data, len(data), None
    if isinstance(data, (str, os.PathLike)):
        f = open(data, "rb")
        return f, os.fstat(f.fileno()).st_size, f
    if isinstance(data, io.TextIOBase):
        content = data.read().encode()
        return content, len(content), None
    if hasattr(data, "read"):
        try:
            start = data.tell()
            size = data.seek(0, io.SEEK_END) - start
            data.seek(start)
            return data, size, None
        except (OSError, AttributeError, ValueError):
            content = data.read()
            if isinstance(content, str):
                content = content.encode()
            return content, len(content), None
    raise TypeError(f"cannot upload a {type(data).__name__}: pass bytes, a local path or a binary file object")


def _create_with_archive(client, body, archive, timeout, not_found):
    """POST /v1/sessions as a form: the request's JSON and the archive,
    streamed from its source (never held whole unless it was bytes)."""
    source, size, owned = _read_source(archive)
    boundary = "cellgate-" + uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="session"\r\n'
            f'Content-Type: application/json\r\n\r\n{json.dumps(body)}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="workspace"; filename="workspace.tar"\r\n'
            f'Content-Type: application/x-tar\r\n\r\n').encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def chunks():
        yield head
        if isinstance(source, bytes):
            yield source
        else:
            left = size
            while left > 0:
                chunk = source.read(min(left, 1 << 20))
                if not chunk:
                    raise ValueError("the archive ended before its announced size")
                left -= len(chunk)
                yield chunk
        yield tail

    try:
        return client.request("POST", "/v1/sessions", body=chunks(), timeout=timeout, not_found=not_found,
                              headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                       "Content-Length": str(len(head) + size + len(tail))})
    finally:
        if owned is not None:
            owned.close()


class Sandbox:
    """A session: ``with Sandbox() as sb: sb.run_code("1 + 1").text``.

    ``url`` and ``token`` default to $CELLGATE_URL and $CELLGATE_TOKEN.
    ``timeout`` is the default per-execution timeout (s), ``idle_timeout`` and
    ``lifetime`` (s) end the session; the gateway caps them at its maxima
    (``sb.limits`` reports what applies). ``env`` takes KERNEL_* names only.
    ``network`` gives the sandbox a way out (docs/egress.md), e.g.
    ``{"allow": ["pypi.org", "*.pythonhosted.org"], "deny": [...], "preset":
    "python-packages"}``; without it the sandbox reaches nothing.
    ``on_idle="pause"`` pauses the session after ``idle_timeout`` instead of
    deleting it; ``auto_resume`` (default True) lets the next cell resume a
    paused session by itself.
    ``template`` ("name" or "name:tag", build_template()) starts the session
    from one of your templates instead of ``kernel``; an unknown one raises
    NotFound.
    ``from_snapshot`` (a Snapshot or its id) starts the session on a copy of
    that snapshot's files, with a new kernel of the snapshot's kernelspec,
    environment and network: ``kernel``, ``env`` and ``network`` cannot be
    given with it (CellgateError 400); the limits and lifecycle can. An
    unknown snapshot raises SnapshotNotFound.
    ``volumes`` mounts named volumes (create_volume()): a list of
    VolumeMount, dicts ``{"name", "path"?, "read_only"?}`` or volume names
    (at most 8). Each is mounted at ``/volumes/<name>`` unless ``path`` (also
    ``/volumes/<something>``) says otherwise. A volume has one writer at a
    time: a second read-write mount raises CellgateError 409 (mount it
    read_only); an unknown volume raises VolumeNotFound.
    ``workspace`` (a tar archive: bytes, a local path or a binary file
    object, e.g. what export_workspace gave) is unpacked into the new
    session's workspace before it is handed over; ``sb.imported`` then holds
    the gateway's report. A malformed archive raises CellgateError 400 and
    no session is left.
    """

    def __init__(self, url=None, token=None, *, kernel=None, template=None, timeout=None, idle_timeout=None,
                 lifetime=None, env=None, output_limit=None, network=None, on_idle=None, auto_resume=None,
                 from_snapshot=None, volumes=None, workspace=None, request_timeout=60.0, _session=None):
        self._client = Client(url, token, timeout=request_timeout)
        self._closed = False
        if _session is None:
            body = {}
            if from_snapshot is not None:
                body["from_snapshot"] = _snapshot_id(from_snapshot)
            for key, value in (("kernel", kernel), ("template", template), ("timeout_s", timeout), ("idle_timeout_s", idle_timeout),
                               ("lifetime_s", lifetime), ("output_limit_bytes", output_limit), ("env", env)):
                if value is not None:
                    body[key] = _seconds(value)
            if network is not None:
                body["network"] = network
            if volumes is not None:
                body["volumes"] = [_mount(v) for v in volumes]
            lifecycle = {k: v for k, v in (("on_idle", on_idle), ("auto_resume", auto_resume)) if v is not None}
            if lifecycle:
                body["lifecycle"] = lifecycle
            # Starting a sandbox can take a while on a busy host.
            if workspace is None:
                _session = self._client.request("POST", "/v1/sessions", json_body=body,
                                                timeout=max(request_timeout, 180),
                                                not_found=_session_not_found(from_snapshot, volumes))
            else:
                _session = _create_with_archive(self._client, body, workspace, max(request_timeout, 600),
                                                _session_not_found(from_snapshot, volumes))
        self._set_model(_session)

    @classmethod
    def connect(cls, session_id, url=None, token=None, **kw):
        """Attaches to an existing session (raises SessionNotFound if it has ended)."""
        client = Client(url, token)
        model = client.request("GET", f"/v1/sessions/{quote_path(session_id)}", not_found=SessionNotFound)
        return cls(url, token, _session=model, **kw)

    @staticmethod
    def list(url=None, token=None):
        """The caller's sessions, as SessionInfo."""
        body = Client(url, token).request("GET", "/v1/sessions")
        return [SessionInfo(s) for s in body.get("sessions", [])]

    def _set_model(self, model):
        self.imported = model.get("imported")
        self._info = SessionInfo(model)
        self.id = self._info.id
        self.commands = Commands(self)

    @property
    def url(self):
        return self._client.base_url

    @property
    def limits(self):
        return self._info.limits

    def _path(self, suffix=""):
        return f"/v1/sessions/{quote_path(self.id)}{suffix}"

    def _request(self, method, suffix, **kw):
        kw.setdefault("not_found", SessionNotFound)
        return self._client.request(method, self._path(suffix), **kw)

    def _file_call(self, call, *args, **kw):
        """Runs a file request; a 404 is SessionNotFound when the session is
        gone, NotFound (the file) while it lives."""
        try:
            return call(*args, not_found=NotFound, **kw)
        except NotFound as e:
            if type(e) is NotFound and not self._alive():
                raise SessionNotFound(e.status, e.reason, e.message) from e
            raise

    def _alive(self):
        try:
            self._request("GET", "")
            return True
        except SessionNotFound:
            return False

    # --- session --------------------------------------------------------------------------

    def info(self):
        """Refreshes and returns the session model (SessionInfo)."""
        self._set_model(self._request("GET", ""))
        return self._info

    def close(self):
        """Deletes the session and its sandbox; closing twice is harmless."""
        if self._closed:
            return
        try:
            self._request("DELETE", "")
        except SessionNotFound:
            pass
        self._closed = True

    kill = close

    def pause(self):
        """Pauses the session: its sandbox stops (no CPU, no memory held) and
        its files stay; under gVisor its kernel's memory is kept too
        (``info().pause["mode"]`` says "memory" or "files"). Returns SessionInfo."""
        self._set_model(self._request("POST", "/pause", timeout=max(self._client.timeout, 180)))
        return self._info

    def resume(self):
        """Resumes a paused session (a no-op when it runs): the same kernel
        when its memory was kept, else a new kernel on its files
        (``pause["resumed_from"]``). Returns SessionInfo."""
        self._set_model(self._request("POST", "/resume", timeout=max(self._client.timeout, 180)))
        return self._info

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<Sandbox {self.id} at {self.url}>"

    # --- snapshots and fork -----------------------------------------------------------------

    def snapshot(self, name=None):
        """Takes a snapshot of the running session: a copy of its workspace
        (mode "files": the kernel's memory is not kept), taken while it runs
        on. Sandbox(from_snapshot=…) starts sessions on copies of it; it
        outlives this session until delete_snapshot(). ``name`` (1 to 128
        characters) defaults to its id. Raises TooManySnapshots past the
        tenant's cap, CellgateError 409 while the session restarts, pauses
        or resumes. Returns the Snapshot."""
        body = {} if name is None else {"name": name}
        raw = self._request("POST", "/snapshots", json_body=body, too_many=TooManySnapshots,
                            timeout=max(self._client.timeout, 600))
        return Snapshot(raw)

    def snapshots(self):
        """The snapshots taken from this session that still exist, oldest first."""
        body = self._request("GET", "/snapshots") or {}
        return [Snapshot(s) for s in body.get("snapshots", [])]

    def fork(self, count=1, name=None):
        """Snapshots the session and starts ``count`` (1 to 16) new sessions
        on copies of it, in one call: a ForkResult ``(snapshot, sandboxes)``.
        Each child has a new id and a new kernel on its own copy of the files
        (``info().origin`` names the snapshot and this session); nothing it
        writes reaches this session or the other children. The children are
        admitted all or none: past the session quota it raises
        TooManySessions and nothing is made (a fork at the snapshot cap is a
        429 too; its message says so). Close the children when done
        (``with sb.fork(2) as (snap, kids):`` does); the snapshot stays until
        delete_snapshot()."""
        body = {"count": count}
        if name is not None:
            body["name"] = name
        raw = self._request("POST", "/fork", json_body=body, timeout=max(self._client.timeout, 600))
        children = [Sandbox(self.url, self._client.token, request_timeout=self._client.timeout, _session=m)
                    for m in raw.get("sessions", [])]
        return ForkResult(Snapshot(raw.get("snapshot")), children)

    # --- execution ------------------------------------------------------------------------

    def run_code(self, code, timeout=None, on_stdout=None, on_stderr=None, on_result=None, on_error=None,
                 stream=None):
        """Runs a cell and returns its Execution.

        With any callback (or ``stream=True``) the output is streamed as
        Server-Sent Events and the callbacks are called as it arrives:
        ``on_stdout(text)``, ``on_stderr(text)``, ``on_result(Result)`` for
        displays and the cell's value, ``on_error(ExecutionError)``.
        """
        body = {"code": code}
        if timeout is not None:
            body["timeout_s"] = _seconds(timeout)
        exec_timeout = timeout or self.limits.get("timeout_s") or DEFAULT_EXEC_TIMEOUT_S
        http_timeout = exec_timeout + ANSWER_GRACE_S
        callbacks = (on_stdout, on_stderr, on_result, on_error)
        if stream is None:
            stream = any(cb is not None for cb in callbacks)
        if not stream:
            raw = self._request("POST", "/execute", json_body=body, timeout=http_timeout)
            return Execution(raw, self._client)
        resp = self._client.open("POST", self._path("/execute"), json_body=body, timeout=http_timeout,
                                 headers={"Accept": "text/event-stream"}, not_found=SessionNotFound)
        try:
            return self._consume_stream(resp, *callbacks)
        finally:
            close_response(resp)

    def _consume_stream(self, resp, on_stdout, on_stderr, on_result, on_error):
        ctype = resp.getheader("Content-Type", "")
        if not ctype.startswith("text/event-stream"):
            # A gateway may answer JSON anyway; honour it rather than hang.
            raw = json.loads(resp.read())
            return Execution(raw, self._client)
        for event, data in iter_sse(resp):
            try:
                payload = json.loads(data)
            except ValueError as e:
                raise CellgateError(resp.status, "bad_event", f"event {event!r} is not JSON: {data[:200]!r}") from e
            if event == "stdout":
                if on_stdout:
                    on_stdout(payload.get("text", ""))
            elif event == "stderr":
                if on_stderr:
                    on_stderr(payload.get("text", ""))
            elif event in ("display", "result"):
                if on_result:
                    main = event == "result"
                    on_result(Result(payload.get("data"), payload.get("metadata"), main,
                                     "execute_result" if main else "display_data",
                                     payload.get("execution_count")))
            elif event == "error":
                if on_error:
                    on_error(ExecutionError.from_json(payload))
            elif event == "end":
                return Execution(payload, self._client)
            elif event == "stream_error":  # the gateway ended the stream: this client fell too far behind
                raise StreamIncomplete(payload.get("message", "the gateway ended the event stream"))
            # 'files' (and anything newer) is in the end event's result too.
        raise StreamIncomplete("the event stream ended without its 'end' event")

    # --- files ----------------------------------------------------------------------------

    def upload(self, path, data):
        """Writes ``data`` (bytes, a local file path or a binary file object)
        to ``path`` in the workspace; parent directories are created.
        Returns the FileInfo."""
        body, size, owned = _read_source(data)
        try:
            raw = self._file_call(self._request, "PUT", f"/files/{quote_path(path)}", body=body,
                                  headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
                                  timeout=max(self._client.timeout, 600))
        finally:
            if owned is not None:
                owned.close()
        return FileInfo.from_json(raw, self._client)

    def import_workspace(self, archive, path=""):
        """Unpacks a tar archive (bytes, a local file path or a binary file
        object, e.g. what export_workspace gave) into the workspace, or into
        its directory ``path``. Directories and regular files only; links,
        devices and unsafe paths are skipped. Returns the gateway's report:
        {"files", "directories", "bytes", "skipped": [{"path", "why"}], "skipped_count"}."""
        body, size, owned = _read_source(archive)
        suffix = "/workspace" + (f"?path={quote_path(path)}" if path else "")
        try:
            return self._file_call(self._request, "PUT", suffix, body=body,
                                   headers={"Content-Type": "application/x-tar", "Content-Length": str(size)},
                                   timeout=max(self._client.timeout, 600))
        finally:
            if owned is not None:
                owned.close()

    def upload_many(self, files, directory=""):
        """Uploads several files in one multipart request: ``files`` maps each
        file name to bytes, a local path or a file object. Returns FileInfos."""
        boundary = "cellgate-" + uuid.uuid4().hex
        parts = []
        if directory:
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n'
                         f'{directory}\r\n'.encode())
        for name, data in files.items():
            body, _, owned = _read_source(data)
            try:
                content = body if isinstance(body, bytes) else body.read()
            finally:
                if owned is not None:
                    owned.close()
            quoted = str(name).replace("\\", "\\\\").replace('"', '\\"')
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{quoted}"\r\n'
                         f'Content-Type: application/octet-stream\r\n\r\n'.encode() + content + b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode())
        raw = self._file_call(self._request, "POST", "/files", body=b"".join(parts),
                              headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
                              timeout=max(self._client.timeout, 600))
        return [FileInfo.from_json(f, self._client) for f in raw.get("files", [])]

    def download(self, path, local_path=None):
        """A workspace file's bytes; with ``local_path`` it is streamed to that
        file instead (parents created) and the local path is returned.
        ``path`` may also be a FileInfo."""
        if isinstance(path, FileInfo):
            path = path.path
        return self._fetch(f"/files/{quote_path(path)}", local_path)

    def export_workspace(self, local_path=None, path=""):
        """The workspace (or its directory ``path``) as a tar archive: its
        bytes, or streamed to ``local_path``. Symlinks and special files are
        left out; ``tarfile`` reads it."""
        suffix = "/workspace" + (f"?path={quote_path(path)}" if path else "")
        return self._fetch(suffix, local_path)

    def _fetch(self, suffix, local_path):
        resp = self._file_call(self._client.open, "GET", self._path(suffix),
                               headers={"Accept": "*/*"}, timeout=max(self._client.timeout, 600))
        try:
            if local_path is None:
                return resp.read()
            local_path = os.fspath(local_path)
            parent = os.path.dirname(local_path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(local_path, "wb") as f:
                while chunk := resp.read(64 * 1024):
                    f.write(chunk)
            return local_path
        finally:
            close_response(resp)

    def executions(self, after=0, limit=100):
        """The session's ledger, oldest first: a list of Usage records with
        ``seq`` greater than `after` (page on with the last one's ``seq``)."""
        from .models import Usage
        body = self._request("GET", f"/executions?after={int(after)}&limit={int(limit)}") or {}
        return [Usage(r) for r in body.get("executions", [])]

    def execution(self, execution_id):
        """One execution's record from the ledger."""
        from .models import Usage
        return Usage(self._request("GET", f"/executions/{quote_path(execution_id)}"))

    def list_files(self, path=""):
        """The entries of a workspace directory ('' is /workspace), as FileInfos."""
        raw = self._file_call(self._request, "GET", "/files", query={"path": path} if path else None)
        return [FileInfo.from_json(e, self._client) for e in raw.get("entries", [])]

    def remove(self, path):
        """Deletes a file, or a directory recursively."""
        self._file_call(self._request, "DELETE", f"/files/{quote_path(path)}")

    # --- network --------------------------------------------------------------------------

    def network(self):
        """The session's network policy, a NetworkPolicy (``enabled`` is False
        when the session was created without one)."""
        return NetworkPolicy(self._request("GET", "/network"))

    def set_network(self, allow=None, deny=None, presets=None):
        """Changes the session's policy for new connections: each list given
        replaces the session's, the others stay. Only a session created with
        a network can change it (else CellgateError 409: create it with
        ``network={"allow": []}`` to open it later). Returns the NetworkPolicy."""
        body = {}
        for key, value in (("allow", allow), ("deny", deny), ("presets", presets)):
            if value is not None:
                body[key] = _entries(value)
        return NetworkPolicy(self._request("PATCH", "/network", json_body=body))

    def network_log(self, after=0, limit=100):
        """The session's connection attempts, allowed and refused, oldest
        first: a list of NetworkConnection records with ``seq`` greater than
        `after` (page on with the last one's ``seq``)."""
        body = self._request("GET", f"/network/log?after={int(after)}&limit={int(limit)}") or {}
        return [NetworkConnection(r) for r in body.get("connections", [])]


class ForkResult(collections.namedtuple("ForkResult", ["snapshot", "sandboxes"])):
    """What Sandbox.fork() made: the ``snapshot`` (a Snapshot) and the
    ``sandboxes`` started from it (a list of Sandbox). It unpacks as a pair;
    as a context manager it closes the sandboxes on exit (not the snapshot)."""

    __slots__ = ()

    def close(self):
        """Closes every child sandbox (closing twice is harmless)."""
        for sb in self.sandboxes:
            sb.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def list_snapshots(url=None, token=None):
    """The caller's snapshots (of every session, ended ones too), oldest first."""
    body = Client(url, token).request("GET", "/v1/snapshots") or {}
    return [Snapshot(s) for s in body.get("snapshots", [])]


def get_snapshot(snapshot, url=None, token=None):
    """One snapshot (a Snapshot or its id), refreshed; SnapshotNotFound if it is gone."""
    return Snapshot(Client(url, token).request("GET", f"/v1/snapshots/{quote_path(_snapshot_id(snapshot))}",
                                               not_found=SnapshotNotFound))


def delete_snapshot(snapshot, url=None, token=None):
    """Deletes a snapshot (a Snapshot or its id) and its copy of the files;
    sessions started from it keep theirs. SnapshotNotFound if it is gone;
    CellgateError 409 while sessions are starting from it."""
    Client(url, token).request("DELETE", f"/v1/snapshots/{quote_path(_snapshot_id(snapshot))}",
                               not_found=SnapshotNotFound)


def create_volume(name, size_bytes=None, url=None, token=None):
    """Makes a named volume: a size-capped file system of the token's that
    outlives sessions; Sandbox(volumes=[...]) mounts it. ``name`` is 1 to 64
    letters, digits, '-' and '_'; ``size_bytes`` 8 MiB to 64 GiB (the
    gateway's default: 1 GiB). CellgateError 409 if the name exists, 400 for
    bad input; TooManyVolumes past the token's quota. Returns the Volume."""
    body = {"name": name}
    if size_bytes is not None:
        body["size_bytes"] = int(size_bytes)
    return Volume(Client(url, token).request("POST", "/v1/volumes", json_body=body, too_many=TooManyVolumes,
                                             timeout=180))


def list_volumes(url=None, token=None):
    """The caller's volumes, as Volume."""
    body = Client(url, token).request("GET", "/v1/volumes") or {}
    return [Volume(v) for v in body.get("volumes", [])]


def get_volume(volume, url=None, token=None):
    """One volume (a Volume or its name), refreshed; VolumeNotFound if there is none."""
    return Volume(Client(url, token).request("GET", _volume_path(volume),
                                             not_found=VolumeNotFound))


def delete_volume(volume, url=None, token=None):
    """Deletes a volume (a Volume or its name) and its files. VolumeNotFound
    if there is none; CellgateError 409 while a session mounts it."""
    Client(url, token).request("DELETE", _volume_path(volume),
                               not_found=VolumeNotFound, timeout=180)


class ProgramRun:
    """A one-shot program's result (``run_once(..., language=...)``): its
    ``compile`` and ``run`` stages (dicts: stdout, stderr, exit_code, signal,
    status, message, cpu_ms, wall_ms, peak_memory_bytes; ``compile`` is None
    for an interpreted language, ``run`` None when the compile failed), its
    ``status`` ("ok", "error", "timeout", "compile_error") and its ``usage``
    record."""

    def __init__(self, raw):
        self.raw = raw
        self.language = raw.get("language")
        self.version = raw.get("version")
        self.compile = raw.get("compile")
        self.run = raw.get("run")
        self.status = raw.get("status")
        self.usage = raw.get("usage") or {}

    @property
    def stdout(self):
        return (self.run or self.compile or {}).get("stdout", "")

    @property
    def stderr(self):
        return (self.run or self.compile or {}).get("stderr", "")

    @property
    def exit_code(self):
        return (self.run or self.compile or {}).get("exit_code")

    def __repr__(self):
        return f"ProgramRun({self.language} {self.version}: {self.status}, exit {self.exit_code})"


def run_once(code, files=None, url=None, token=None, timeout=None, language=None, version=None, stdin=None,
             args=None):
    """Runs ``code`` in a fresh sandbox that is destroyed afterwards.

    ``files`` maps workspace paths to bytes / local paths / file objects (or
    is a list of local paths, uploaded under their base names). The produced
    files come back inline: ``execution.files[i].content``.

    With ``language`` (any of GET /api/v2/runtimes's names or aliases: "c",
    "rust", "go", "javascript", "r", …; ``version`` picks one, "*" the
    newest), ``code`` is a program of that language, compiled if it needs it
    and run with ``stdin`` and ``args``: the result is a ProgramRun.
    """
    client = Client(url, token)
    if isinstance(files, (list, tuple)):
        files = {os.path.basename(os.fspath(p)): p for p in files}
    inline = []
    for dest, data in (files or {}).items():
        body, _, owned = _read_source(data)
        try:
            content = body if isinstance(body, bytes) else body.read()
        finally:
            if owned is not None:
                owned.close()
        inline.append({"path": str(dest), "content_base64": base64.b64encode(content).decode()})
    body = {"code": code}
    if inline:
        body["files"] = inline
    if timeout is not None:
        body["timeout_s"] = _seconds(timeout)
    program = language is not None
    if program:
        body["language"] = language
        body["version"] = version or "*"
        body["stdin"] = stdin or ""
        body["args"] = [str(a) for a in (args or [])]
    http_timeout = (timeout or DEFAULT_EXEC_TIMEOUT_S) + ANSWER_GRACE_S + 180
    raw = client.request("POST", "/v1/execute", json_body=body, timeout=http_timeout)
    return ProgramRun(raw) if program else Execution(raw, client)
