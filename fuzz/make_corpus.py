#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/<target>/.

A handful of valid and invalid inputs per target, so the fuzzer starts from
real framings instead of discovering offset tables byte by byte. Deterministic:
running it again gives the same files. Standard library only.

    /usr/bin/python3 fuzz/make_corpus.py
"""

import hashlib
import hmac
import json
import pathlib
import shutil
import struct

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"

# Must match fuzz_key in zmq_wire_fuzzer.cpp.
FUZZ_KEY = b"cellgate-fuzz-key-0123456789abcdef"

HEADER = {
    "msg_id": "m-1",
    "msg_type": "execute_request",
    "session": "s-1",
    "username": "u",
    "version": "5.3",
    "date": "2026-01-01T00:00:00.000000Z",
}
CONTENT = {"code": "print('\u00e9')", "silent": False, "store_history": True}


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def legacy_text(channel="shell", **overrides):
    msg = {"channel": channel, "header": HEADER, "parent_header": {}, "metadata": {},
           "content": CONTENT, "buffers": []}
    msg.update(overrides)
    return compact(msg)


def legacy_binary(parts):
    """u32be nbufs, u32be offsets, then the JSON part and the buffers."""
    nbufs = len(parts)
    offsets = [4 * (nbufs + 1)]
    for p in parts[:-1]:
        offsets.append(offsets[-1] + len(p))
    return struct.pack("!%dI" % (nbufs + 1), nbufs, *offsets) + b"".join(parts)


def v1(parts, offset_number=None, first=None):
    """u64le offset_number, u64le offsets, then channel, 4 JSON parts, buffers."""
    n = len(parts) + 1
    offsets = [8 * (1 + n)]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    if first is not None:
        offsets[0] = first
    count = n if offset_number is None else offset_number
    return struct.pack("<%dQ" % (n + 1), count, *offsets) + b"".join(parts)


def v1_parts(channel=b"shell", header=None, content=None, buffers=()):
    return [channel, compact(header or HEADER), b"{}", b"{}", compact(content or CONTENT),
            *buffers]


def zmq_input(frames):
    """Byte 0 = frame count, then u16be length + bytes per frame."""
    out = bytes([len(frames)])
    for f in frames:
        out += struct.pack("!H", len(f)) + f
    return out


def sign(parts):
    mac = hmac.new(FUZZ_KEY, digestmod=hashlib.sha256)
    for p in parts:
        mac.update(p)
    return mac.hexdigest().encode()


def ws_json_seeds():
    deep = b'{"channel":"shell","header":{"msg_id":"a","msg_type":"t"},"content":{"x":' + \
        b"[" * 600 + b"]" * 600 + b"}}"
    return {
        "text_valid": legacy_text(),
        "text_control": legacy_text("control"),
        "text_minimal": b'{"header":{"msg_id":"","msg_type":"kernel_info_request"}}',
        "text_iopub": legacy_text("iopub"),
        "text_unknown_channel": legacy_text("hb"),
        "text_array": b"[1,2,3]",
        "text_no_msg_id": compact({"channel": "shell", "header": {"msg_type": "t"}}),
        "text_bad_utf8": legacy_text()[:-3] + b"\xff\xfe}",
        "text_deep": deep,
        "binary_two_buffers": legacy_binary([legacy_text(), b"\x00\x01\x02", b"buffer"]),
        "binary_one_part": legacy_binary([legacy_text()]),
        "binary_bad_offset0": struct.pack("!3I", 2, 13, 40) + legacy_text() + b"x",
        "binary_decreasing": struct.pack("!4I", 3, 16, 10, 12) + legacy_text() + b"ab",
        "binary_huge_count": struct.pack("!2I", 0xFFFFFFFF, 8),
    }


def ws_v1_seeds():
    header100 = b'{"msg_id":"m-9","msg_type":"status","session":"s","date":"'
    header100 += b"0" * (100 - len(header100) - 2) + b'"}'
    content30 = b'{"k":"' + b"x" * 22 + b'"}'
    return {
        "valid": v1(v1_parts()),
        "valid_buffers": v1(v1_parts(buffers=(b"\x00\x01\x02", b"", b"buffer"))),
        "stdin": v1(v1_parts(b"stdin", {"msg_id": "i", "msg_type": "input_reply"},
                             {"value": "x"})),
        "reference_iopub": v1([b"iopub", header100, b"{}", b"{}", content30]),
        "spaced_parts": v1([b"control", b' { "msg_id" : "a", "msg_type" : "t" } ', b"{ }",
                            b"{}", b'{"a":[1.5,2e3,null]}\n']),
        "wrong_offset0": v1(v1_parts(), first=48),
        "huge_count": v1(v1_parts(), offset_number=0xFFFFFFFFFFFFFFFF),
        "too_few_offsets": v1(v1_parts(), offset_number=5),
        "truncated": v1(v1_parts())[:-7],
        "array_content": v1([b"shell", compact(HEADER), b"{}", b"{}", b"[{}]"]),
        "nul_junk": v1([b"shell", compact(HEADER), b"{}", b"{}", b"{}\x00junk"]),
    }


def zmq_seeds():
    header = compact(HEADER)
    parent = compact(dict(HEADER, msg_id="parent-1"))
    content = compact(CONTENT)
    parts = [header, parent, b"{}", content]
    wire = [b"client-id", b"<IDS|MSG>", sign(parts), *parts, b"\x00buffer"]
    return {
        # Read by the raw decode: a complete, correctly signed multipart.
        "raw_valid": zmq_input(wire),
        "raw_no_identity": zmq_input(wire[1:]),
        "raw_bad_signature": zmq_input(wire[:2] + [b"0" * 64] + wire[3:]),
        "raw_no_delimiter": zmq_input([b"client-id", *parts]),
        "raw_too_few_parts": zmq_input(wire[:5]),
        # Read by the signed decode: the four JSON parts and buffers.
        "parts_valid": zmq_input(parts + [b"buf"]),
        "parts_empty_parent": zmq_input([header, b"{}", b"{}", content]),
        "parts_no_session": zmq_input([compact({"msg_id": "a", "msg_type": "t"}), b"{}", b"{}",
                                       b"{}"]),
        "parts_parent_without_id": zmq_input([header, b'{"x":1}', b"{}", b"{}"]),
        "parts_array_content": zmq_input([header, b"{}", b"{}", b"[]"]),
        "parts_nul_junk": zmq_input([header, b"{}", b"{}", b"{}\x00junk"]),
        "parts_bad_json": zmq_input([header[:-1], b"{}", b"{}", b"{}"]),
    }


def main():
    targets = {
        "ws_json_fuzzer": ws_json_seeds(),
        "ws_v1_fuzzer": ws_v1_seeds(),
        "zmq_wire_fuzzer": zmq_seeds(),
    }
    for target, seeds in targets.items():
        folder = CORPUS / target
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for name, data in seeds.items():
            (folder / name).write_bytes(data)
        print(f"{target}: {len(seeds)} seeds in {folder.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
