"""The SDK's hand-written Server-Sent Events parser, on fixed input (no gateway)."""
import io

import sdk_support  # noqa: F401
from cellgate._http import iter_sse


class FakeResponse(io.BytesIO):
    """What iter_sse reads: readline() over the body."""


def events(raw):
    return list(iter_sse(FakeResponse(raw)))


def test_events_comments_and_multiline_data():
    raw = (b": keepalive\n\n"
           b"event: stdout\ndata: {\"text\": \"a\"}\n\n"
           b"event: display\r\ndata: {\"data\":\r\ndata:  {}}\r\n\r\n"
           b"data:no-space\n\n"
           b"event: end\ndata: {}\n")          # a last event without its blank line is not dispatched
    assert events(raw) == [("stdout", '{"text": "a"}'), ("display", '{"data":\n {}}'), ("message", "no-space")]


def test_event_without_data_is_ignored_and_unknown_fields_skipped():
    raw = b"event: nothing\n\nid: 7\nretry: 10\nevent: files\ndata: {\"files\": []}\n\n"
    assert events(raw) == [("files", '{"files": []}')]
