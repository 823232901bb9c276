"""Runs a Jupyter notebook (nbformat 4) in a cellgate sandbox, cell by cell,
and writes the outputs back as proper nbformat outputs.

Inputs: the notebook may declare the files it reads in its metadata,
``{"cellgate": {"inputs": ["data/sales.csv", …]}}``, paths relative to the
notebook; each is uploaded under the same relative path in the workspace
(the kernel's working directory), so the notebook reads ``data/sales.csv``
both locally and in the sandbox.

Needs Debian's python3-nbformat.
"""
import os
from pathlib import Path, PurePosixPath

from .models import ExecutionError
from .sandbox import Sandbox


# Names Windows gives to devices, whatever the extension ("nul.txt" too).
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}


def local_path(download_dir, workspace_path):
    """Where a file the kernel made goes under ``download_dir``, or None when
    its name could escape it on some system: an absolute path, "..", a drive
    or stream (":"; "C:x" is drive-relative on Windows), a backslash,
    or a device name. The kernel picks these names (review L10)."""
    parts = PurePosixPath(workspace_path).parts
    if not parts or PurePosixPath(workspace_path).is_absolute():
        return None
    for part in parts:
        if part in ("", ".", "..") or ":" in part or "\\" in part or "\0" in part:
            return None
        if part.split(".")[0].rstrip(" ").lower() in _RESERVED or part.endswith((" ", ".")):
            return None
    return os.path.join(download_dir, *parts)


class NotebookRun:
    """What ``run_notebook`` did: the executed notebook (an nbformat
    NotebookNode), where it was saved, the first error (cell index and
    ExecutionError-like dict) and the files the cells produced."""

    def __init__(self, notebook, output_path=None):
        self.notebook = notebook
        self.output_path = output_path
        self.errors = []          # [(cell_index, {"ename", "evalue", "traceback", "traceback_text"})]
        self.produced = {}        # workspace path -> FileInfo, newest version
        self.downloaded = []      # local paths
        self.not_downloaded = []  # workspace paths with no safe local name (see local_path)
        self.cells_run = 0
        self.session_id = None

    @property
    def ok(self):
        return not self.errors


class _CellOutputs:
    """Collects one cell's outputs in arrival order (from the stream's callbacks)."""

    def __init__(self, nbformat):
        self.nbf = nbformat
        self.outputs = []
        self.error = None

    def _stream(self, name, text):
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last.output_type == "stream" and last.name == name:
            last.text += text
        else:
            self.outputs.append(self.nbf.v4.new_output("stream", name=name, text=text))

    def on_stdout(self, text):
        self._stream("stdout", text)

    def on_stderr(self, text):
        self._stream("stderr", text)

    def on_result(self, result):
        if result.is_main_result:
            self.outputs.append(self.nbf.v4.new_output("execute_result", data=result.data,
                                                       metadata=result.metadata,
                                                       execution_count=result.execution_count))
        else:
            self.outputs.append(self.nbf.v4.new_output("display_data", data=result.data, metadata=result.metadata))

    def on_error(self, error):
        self.error = error
        self.outputs.append(self.nbf.v4.new_output("error", ename=error.name, evalue=error.value,
                                                   traceback=error.traceback))


def notebook_inputs(nb, nb_dir):
    """[(local path, workspace path)] declared in the notebook's cellgate metadata."""
    declared = nb.metadata.get("cellgate", {}).get("inputs", [])
    pairs = []
    for rel in declared:
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"notebook input {rel!r} must be a relative path inside the notebook's folder")
        pairs.append((Path(nb_dir) / p, str(p)))
    return pairs


def run_notebook(path, url=None, token=None, *, uploads=(), output=None, allow_errors=False, download_dir=None,
                 timeout=None, sandbox=None, keep=False, network=None, log=None):
    """Executes the notebook at ``path`` in a new session (or ``sandbox``).

    ``uploads``: extra [(local path, workspace path)]. ``output``: where the
    executed notebook goes (default: ``<name>.executed.ipynb`` beside it;
    False: not saved). Stops at the first failing cell unless
    ``allow_errors``. ``download_dir``: download every file the cells
    produced there. ``timeout``: per cell. ``network``: the new session's
    network policy (see Sandbox). ``log(msg)``: progress messages.
    Returns a NotebookRun.
    """
    import nbformat

    path = Path(path)
    nb = nbformat.read(str(path), as_version=4)
    if output is None:
        output = path.with_name(path.stem + ".executed.ipynb")
    run = NotebookRun(nb, Path(output) if output else None)
    say = log or (lambda msg: None)

    own = sandbox is None
    sb = sandbox if sandbox is not None else Sandbox(url, token, network=network)
    run.session_id = sb.id
    try:
        for local, dest in list(notebook_inputs(nb, path.parent)) + list(uploads):
            info = sb.upload(dest, local)
            say(f"uploaded {local} -> {info.path} ({info.size} B)")

        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        stopped = False
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or stopped or not cell.source.strip():
                continue
            collected = _CellOutputs(nbformat)
            ex = sb.run_code(cell.source, timeout=timeout, on_stdout=collected.on_stdout,
                             on_stderr=collected.on_stderr, on_result=collected.on_result,
                             on_error=collected.on_error)
            run.cells_run += 1
            cell.execution_count = ex.execution_count
            for out in collected.outputs:
                if out.output_type == "execute_result" and out.get("execution_count") is None:
                    out.execution_count = ex.execution_count
            if ex.status != "ok" and collected.error is None:
                # A timeout or a dead kernel has no Jupyter error; record one so the notebook shows it.
                detail = "the kernel was restarted" if ex.kernel_restarted else ""
                name = {"timeout": "CellTimeout", "kernel_died": "KernelDied"}.get(ex.status, "CellInterrupted")
                value = f"cell {index} ended with status {ex.status!r}" + (f" ({detail})" if detail else "")
                collected.outputs.append(nbformat.v4.new_output("error", ename=name, evalue=value, traceback=[]))
                collected.error = ExecutionError(name, value, [], value)
            cell.outputs = collected.outputs
            for f in ex.files:
                if f.change == "deleted":
                    run.produced.pop(f.path, None)
                else:
                    run.produced[f.path] = f
            if collected.error is not None:
                err = collected.error
                run.errors.append((index, {"ename": err.name, "evalue": err.value, "traceback": err.traceback,
                                           "traceback_text": err.traceback_text}))
                say(f"cell {index} failed: {err.name}: {err.value}")
                if not allow_errors:
                    stopped = True
            else:
                say(f"cell {index} ran ({ex.duration_ms} ms)")

        if download_dir is not None:
            for f in run.produced.values():
                local = local_path(download_dir, f.path)
                if local is None:
                    run.not_downloaded.append(f.path)
                    say(f"not downloaded: {f.path!r} has no safe local name")
                    continue
                sb.download(f.path, local)
                run.downloaded.append(local)
                say(f"downloaded {f.path} -> {local}")
    finally:
        if own and not keep:
            sb.close()

    nbformat.validate(nb)
    if run.output_path:
        nbformat.write(nb, str(run.output_path))
    return run
