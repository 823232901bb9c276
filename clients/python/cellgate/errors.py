"""Exceptions raised by the SDK. Every error the gateway answers is JSON
``{"reason", "message"}`` with an HTTP status; it becomes a CellgateError."""


class CellgateError(Exception):
    """The gateway refused a request, or could not be reached.

    ``status`` is the HTTP status (None when no response arrived), ``reason``
    and ``message`` come from the gateway's JSON error body.
    """

    def __init__(self, status, reason, message):
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")


class NotFound(CellgateError):
    """404: the session or the file does not exist (or belongs to another tenant)."""


class SessionNotFound(NotFound):
    """404 on a session: it was deleted, culled for idleness or reached its lifetime."""


class SnapshotNotFound(NotFound):
    """404 on a snapshot: it was deleted, or belongs to another tenant."""


class VolumeNotFound(NotFound):
    """404 on a named volume: it does not exist (or belongs to another tenant)."""


class TooManySessions(CellgateError):
    """429: the gateway's (or the tenant's) session quota is full."""


class TooManySnapshots(CellgateError):
    """429 on a snapshot: the tenant keeps as many as it may; delete one first."""


class TooManyVolumes(CellgateError):
    """429 on a volume: the token's volume quota (count or total bytes) is full."""


class ConnectionFailed(CellgateError):
    """No HTTP response: the gateway is down, unreachable, or the connection broke."""

    def __init__(self, message):
        super().__init__(None, "connection_failed", message)


class StreamIncomplete(CellgateError):
    """The event stream ended before its ``end`` event (connection lost mid-run)."""

    def __init__(self, message):
        super().__init__(None, "stream_incomplete", message)
