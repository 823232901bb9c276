"""cellgate: a Python client for the cellgate code-interpreter gateway's /v1 agent API.

    from cellgate import Sandbox
    with Sandbox("http://127.0.0.1:8888", token) as sb:
        sb.upload("data.csv", "local/data.csv")
        ex = sb.run_code("import pandas as pd; pd.read_csv('data.csv').shape")
        print(ex.text, ex.logs.stdout, ex.error)

Standard library only; Python 3.9+.
"""
from .commands import CommandExitError, CommandHandle, CommandResult
from .errors import (CellgateError, ConnectionFailed, NotFound, SessionNotFound, SnapshotNotFound, StreamIncomplete,
                     TooManySessions, TooManySnapshots, TooManyVolumes, VolumeNotFound)
from .models import (Execution, ExecutionError, FileInfo, Logs, NetworkConnection, NetworkPolicy, Result,
                     SessionInfo, Snapshot, Truncated, Volume, VolumeMount)
from .sandbox import (ForkResult, ProgramRun, Sandbox, create_volume, delete_snapshot, delete_volume, get_snapshot, get_volume,
                      list_snapshots, list_volumes, run_once)
from .templates import (TemplateBuildError, TemplateNotFound, build_template, copy, delete_template, get_template,
                        list_templates, tag_template, template_tags, upload_files)

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "run_once", "ProgramRun", "ForkResult", "list_snapshots", "get_snapshot", "delete_snapshot",
    "create_volume", "list_volumes", "get_volume", "delete_volume",
    "build_template", "list_templates", "get_template", "delete_template", "TemplateBuildError", "TemplateNotFound",
    "copy", "upload_files", "tag_template", "template_tags",
    "CommandExitError", "CommandHandle", "CommandResult",
    "Execution", "ExecutionError", "FileInfo", "Logs", "NetworkConnection", "NetworkPolicy", "Result",
    "SessionInfo", "Snapshot", "Truncated", "Volume", "VolumeMount",
    "CellgateError", "ConnectionFailed", "NotFound", "SessionNotFound", "SnapshotNotFound", "StreamIncomplete",
    "TooManySessions", "TooManySnapshots", "TooManyVolumes", "VolumeNotFound",
]
