"""Commands in a session's sandbox: ``sb.commands.run("ls -la")``.

Each command is a process inside the session's sandbox with the kernel's own
confinement (same user, no network, the same limits), started with
``bash -lc`` in ``/home/user`` (the workspace) unless given an argv.
"""
import base64
import json

from ._http import close_response, iter_sse
from .errors import CellgateError, StreamIncomplete


class CommandExitError(CellgateError):
    """A command ended with a non-zero exit code (or was killed)."""

    def __init__(self, result):
        self.result = result
        super().__init__(200, "command_failed",
                         f"command exited with {result.exit_code}"
                         + (f" ({result.signal})" if result.signal else "")
                         + (f": {result.stderr[-500:]}" if result.stderr else ""))

    @property
    def exit_code(self):
        return self.result.exit_code

    @property
    def stdout(self):
        return self.result.stdout

    @property
    def stderr(self):
        return self.result.stderr


class CommandResult:
    """How a command ended, and what it printed (within the session's output cap)."""

    def __init__(self, raw):
        self.raw = raw
        self.pid = raw.get("pid")
        exit_ = raw.get("exit") or {}
        self.exit_code = exit_.get("exit_code")
        self.signal = exit_.get("signal")
        self.stdout = raw.get("stdout", "")
        self.stderr = raw.get("stderr", "")
        self.truncated = bool(raw.get("truncated", False))

    def __repr__(self):
        return f"<CommandResult pid={self.pid} exit_code={self.exit_code}>"


class CommandHandle:
    """A command running in the background: send it input, signal it, wait for it."""

    def __init__(self, commands, raw):
        self._commands = commands
        self.pid = raw["pid"]
        self.raw = raw

    def send_stdin(self, data, eof=False):
        body = {"eof": eof}
        if isinstance(data, bytes):
            body["data_base64"] = base64.b64encode(data).decode()
        else:
            body["data"] = data
        self._commands._request("POST", f"/{self.pid}/stdin", json_body=body)

    def close_stdin(self):
        self.send_stdin("", eof=True)

    def kill(self, signal="SIGKILL"):
        """Sends ``signal``; False when the command had already ended."""
        try:
            self._commands._request("POST", f"/{self.pid}/signal", json_body={"signal": signal})
            return True
        except CellgateError as e:
            if e.status == 409:
                return False
            raise

    def wait(self, on_stdout=None, on_stderr=None, timeout=None):
        """Follows the command to its end; raises CommandExitError unless it exits 0."""
        result = self._commands._follow(f"/{self.pid}/events", on_stdout, on_stderr, timeout)
        if result.exit_code != 0:
            raise CommandExitError(result)
        return result

    def info(self):
        return self._commands._request("GET", f"/{self.pid}")


class Commands:
    """``sb.commands``: run, start in the background, list."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def _request(self, method, suffix, **kw):
        return self._sb._request(method, "/commands" + suffix, **kw)

    def run(self, cmd, *, cwd=None, env=None, timeout=None, background=False, stdin=False, on_stdout=None,
            on_stderr=None, tty=None):
        """Runs ``cmd`` (a shell command line, or a list for an argv) and
        returns its CommandResult; raises CommandExitError on a non-zero
        exit. With ``background=True`` returns a CommandHandle at once."""
        body = {"argv": list(cmd)} if isinstance(cmd, (list, tuple)) else {"cmd": cmd}
        for key, value in (("cwd", cwd), ("env", env), ("timeout_s", timeout), ("tty", tty)):
            if value is not None:
                body[key] = value
        if background:
            body["background"] = True
            body["stdin"] = bool(stdin)
            return CommandHandle(self, self._request("POST", "", json_body=body))
        if on_stdout or on_stderr:
            result = self._follow("", on_stdout, on_stderr, timeout, body=body)
        else:
            http_timeout = (timeout or self._sb.limits.get("timeout_s") or 300) + 30
            result = CommandResult(self._request("POST", "", json_body=body, timeout=http_timeout))
        if result.exit_code != 0:
            raise CommandExitError(result)
        return result

    def list(self):
        """The session's commands (running, and recently ended), as dicts."""
        return self._request("GET", "")["commands"]

    def _follow(self, suffix, on_stdout, on_stderr, timeout, body=None):
        http_timeout = (timeout or self._sb.limits.get("timeout_s") or 300) + 30
        path = self._sb._path("/commands" + suffix)
        resp = self._sb._client.open("POST" if body is not None else "GET", path, json_body=body,
                                     timeout=http_timeout, headers={"Accept": "text/event-stream"})
        out, err, pid = [], [], None
        try:
            for event, data in iter_sse(resp):
                payload = json.loads(data)
                if event == "start":
                    pid = payload.get("pid")
                elif event == "stdout":
                    out.append(payload.get("text", ""))
                    if on_stdout:
                        on_stdout(payload.get("text", ""))
                elif event == "stderr":
                    err.append(payload.get("text", ""))
                    if on_stderr:
                        on_stderr(payload.get("text", ""))
                elif event == "pty":
                    # A terminal's output is its stdout, as in the JSON answer.
                    text = base64.b64decode(payload.get("data_base64", "")).decode("utf-8", "replace")
                    out.append(text)
                    if on_stdout:
                        on_stdout(text)
                elif event == "exit":
                    return CommandResult({"pid": pid, "exit": payload, "stdout": "".join(out), "stderr": "".join(err)})
                elif event == "stream_error":
                    raise StreamIncomplete(payload.get("message", "the gateway ended the event stream"))
        finally:
            close_response(resp)
        raise StreamIncomplete("the command's event stream ended without its 'exit' event")
