#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/<target>/.

A handful of valid and invalid inputs per target, so the fuzzer starts from
real framings and real client requests instead of discovering offset tables
and header syntax byte by byte. Deterministic: running it again gives the same
files. Inputs merged in by `fuzz/run.sh --update-corpus` (40-hex names) are
left alone. Standard library only.

    /usr/bin/python3 fuzz/make_corpus.py
"""

import hashlib
import hmac
import json
import pathlib
import re
import struct

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
MERGED_NAME = re.compile(r"[0-9a-f]{40}")

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
        # Valid JSON that no double holds: v1 passes it, the legacy framing cannot.
        "overflow_number": v1([b"control", b'{"msg_id":"a","msg_type":"t"}', b"{}", b"{}",
                               b'{"a":[5.1e4003,null]}']),
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


# HTTP requests as our clients send them. Must match fuzz_token in
# http_request_fuzzer.cpp.
TOKEN = "fuzz-token-0123456789"
KID = "5b3a4f2e-7d1c-4e8a-9f60-2c4b8d1e0a37"
SID = "0f9e8d7c-6b5a-4938-8271-605f4e3d2c1b"
BROWSER = (
    "Host: 127.0.0.1:8888\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n"
    "Accept: */*\r\n"
    "Accept-Language: en-US,en;q=0.5\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
    "Referer: http://127.0.0.1:8888/lab\r\n"
    "X-XSRFToken: 2|1a2b3c4d|5e6f|1700000000\r\n"
    "Cookie: _xsrf=2|1a2b3c4d|5e6f|1700000000\r\n"
)


def http_request(method, target, headers=(), body=b"", auth=True, length=True, base=BROWSER):
    head = f"{method} {target} HTTP/1.1\r\n{base}"
    if auth:
        head += f"Authorization: token {TOKEN}\r\n"
    for h in headers:
        head += h + "\r\n"
    if length and (body or method in ("POST", "PUT", "PATCH")):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def http_json(method, target, obj, headers=(), **kw):
    return http_request(method, target, ("Content-Type: application/json", *headers), compact(obj), **kw)


def chunked(body, sizes):
    out, pos = b"", 0
    for n in sizes:
        piece = body[pos:pos + n]
        pos += n
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\n\r\n"


def multipart(boundary, fields, files):
    out = b""
    for name, value in fields:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n").encode() + value + b"\r\n"
    for name, filename, ctype, data in files:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n"
                f"Content-Type: {ctype}\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


NOTEBOOK = {"cells": [{"cell_type": "code", "execution_count": None, "id": "a1", "metadata": {},
                       "outputs": [], "source": ["import pandas as pd\n", "pd.DataFrame({'a': [1]})"]}],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def http_seeds():
    ws_headers = ("Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Origin: http://127.0.0.1:8888")
    boundary = "----WebKitFormBoundary7MA4YWxkTrZu0gW"
    form = multipart(boundary, [("path", b"data")],
                     [("file", "sales.csv", "text/csv", b"region,amount\nnorth,10\n"),
                      ("file", "../../etc/passwd", "application/octet-stream", b"\x00\x01")])
    upload = b"x,y\n" + b"1,2\n" * 40
    deep = {"path": "deep.ipynb", "kernel": {"name": "python3"}}
    deep_body = compact(deep)[:-2] + b',"x":' + b"[" * 600 + b"]" * 600 + b"}}"
    spec = {"id": "sb-1", "image": "python", "runtime": "runc",
            "limits": {"memory_bytes": 2147483648, "pids": 256, "cpu_millis": 1000, "workspace_bytes": 1073741824,
                       "tmp_bytes": 268435456, "nofile": 4096, "fsize_bytes": 0, "cpu_shares": 1024},
            "workspace_dir": "", "env": {"KERNEL_USERNAME": "u"}, "uid": 1000, "gid": 1000,
            "preload": ["numpy"], "start_timeout_ms": 30000}
    return {
        # JupyterLab and @jupyterlab/services.
        "lab_get_api": http_request("GET", "/api", auth=False),
        "lab_list_kernels": http_request("GET", "/api/kernels?1700000000000"),
        "lab_kernelspecs": http_request("GET", "/api/kernelspecs"),
        # Ids another cluster node made (the fuzzer's view: tag 1… a peer, 2… gone): relayed, 410.
        "hop_peer_session": http_request("GET", "/v1/sessions/1a2b3c4d-0000-4000-8000-00000000abcd/files/a.txt"),
        "hop_peer_channels": http_request("GET", "/api/kernels/1a2b3c4d-0000-4000-8000-00000000abcd/channels"
                                          "?session_id=s-1", headers=ws_headers),
        "hop_gone_kernel": http_request("DELETE", "/api/kernels/2b3c4d5e-0000-4000-8000-00000000abcd"),
        "hop_e2b_plane": http_request("POST", "/e2b/execute", body=b'{"code":"1"}',
                                      headers=("E2b-Sandbox-Id: 1a2b3c4d-0000-4000-8000-00000000abcd",
                                               "E2b-Sandbox-Port: 49999")),
        "hop_e2b_host": http_request("GET", "/health", auth=False, base=BROWSER.replace(
            "Host: 127.0.0.1:8888", "Host: 49999-1a2b3c4d-0000-4000-8000-00000000abcd.cellgate.test")),
        "lab_sessions": http_request("GET", "/api/sessions?1700000000001"),
        "lab_contents_root": http_request("GET", "/api/contents?content=1&hash=0"),
        "lab_contents_dir": http_request("GET", f"/api/contents/{KID}/data?content=1&type=directory"),
        "lab_contents_file": http_request("GET", f"/api/contents/{KID}/notes%20%C3%A9.txt?type=file&format=text&content=1"),
        "lab_checkpoints": http_request("GET", f"/api/contents/{KID}/a.ipynb/checkpoints"),
        "lab_me": http_request("GET", "/api/me"),
        "lab_ws_upgrade": http_request("GET", f"/api/kernels/{KID}/channels?session_id={SID}", ws_headers),
        "lab_ws_upgrade_v1": http_request(
            "GET", f"/api/kernels/{KID}/channels?session_id={SID}&token={TOKEN}",
            ws_headers + ("Sec-WebSocket-Protocol: v1.kernel.websocket.jupyter.org",), auth=False),
        "lab_ws_wrong_origin": http_request("GET", f"/api/kernels/{KID}/channels",
                                            ws_headers[:4] + ("Origin: https://evil.example", "Origin: x")),
        "lab_start_kernel": http_json("POST", "/api/kernels", {"name": "python3", "env": {"KERNEL_USERNAME": "u",
                                                                                           "PATH": "/x"}}),
        "lab_start_kernel_empty": http_request("POST", "/api/kernels"),
        "lab_session_create": http_json("POST", "/api/sessions", {"path": "Untitled.ipynb", "name": "Untitled.ipynb",
                                                                   "type": "notebook",
                                                                   "kernel": {"name": "python3"}}),
        "lab_session_patch": http_json("PATCH", f"/api/sessions/{SID}", {"path": "b.ipynb", "kernel": {"id": KID}}),
        "lab_save_notebook": http_json("PUT", f"/api/contents/{KID}/analysis.ipynb",
                                       {"type": "notebook", "format": "json", "content": NOTEBOOK}),
        "lab_upload_chunk1": http_json("PUT", f"/api/contents/{KID}/big.bin",
                                       {"type": "file", "format": "base64", "content": "AAECAwQF", "chunk": 1,
                                        "name": "big.bin", "path": f"{KID}/big.bin"}),
        "lab_upload_chunk_last": http_json("PUT", f"/api/contents/{KID}/big.bin",
                                           {"type": "file", "format": "base64", "content": "BgcICQ==", "chunk": -1}),
        "lab_new_untitled": http_json("POST", f"/api/contents/{KID}", {"type": "file", "ext": "py"}),
        "lab_copy": http_json("POST", f"/api/contents/{KID}/data", {"copy_from": f"{KID}/a.ipynb"}),
        "lab_rename": http_json("PATCH", f"/api/contents/{KID}/a.txt", {"path": f"{KID}/b.txt"}),
        "lab_delete": http_request("DELETE", f"/api/contents/{KID}/b.txt"),
        "lab_download": http_request("GET", f"/files/{KID}/out/plot.png?download=1"),
        "lab_download_crlf": http_request("GET", f"/files/{KID}/a%0D%0ASet-Cookie:%20x=1.txt?download=1"),
        "lab_interrupt": http_request("POST", f"/api/kernels/{KID}/interrupt"),
        "cors_preflight": http_request("OPTIONS", "/api/kernels", (
            "Origin: https://lab.example.com", "Access-Control-Request-Method: POST",
            "Access-Control-Request-Headers: authorization,content-type"), auth=False),
        # Agent API (Python SDK, curl, the JS client).
        "v1_create": http_json("POST", "/v1/sessions", {"kernel": "python3", "timeout_s": 30, "idle_timeout_s": 600,
                                                        "lifetime_s": 3600, "output_limit_bytes": 1048576,
                                                        "env": {"KERNEL_DATASET": "sales"}},
                               base="Host: localhost\r\nUser-Agent: python-requests/2.28.1\r\n"
                                    "Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\n"),
        "v1_execute": http_json("POST", f"/v1/sessions/{SID}/execute",
                                {"code": "import matplotlib.pyplot as plt\nplt.plot([1,2])\nplt.savefig('p.png')",
                                 "timeout_s": 10}),
        "v1_execute_sse": http_json("POST", f"/v1/sessions/{SID}/execute", {"code": "print(1)"},
                                    ("Accept: text/event-stream",)),
        "v1_one_shot": http_json("POST", "/v1/execute",
                                 {"code": "open('out.txt','w').write(open('data/in.csv').read())", "timeout_s": 60,
                                  "files": [{"path": "data/in.csv", "content_base64": "YSxiCjEsMgo="}],
                                  "env": {"KERNEL_X": "1"}}),
        "v1_multipart": http_request("POST", f"/v1/sessions/{SID}/files",
                                     (f"Content-Type: multipart/form-data; boundary={boundary}",), form),
        "v1_put_expect": http_request("PUT", f"/v1/sessions/{SID}/files/data/x.csv",
                                      ("Expect: 100-continue", "Content-Type: text/csv"), upload,
                                      base="Host: 127.0.0.1:8888\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n"),
        "v1_put_chunked": http_request("PUT", f"/v1/sessions/{SID}/files/big/x.csv",
                                       ("Transfer-Encoding: chunked",), chunked(upload, (7, 64, 1000)),
                                       length=False),
        "v1_list_files": http_request("GET", f"/v1/sessions/{SID}/files?path=data%2Fsub"),
        "v1_download": http_request("GET", f"/v1/sessions/{SID}/files/out/report%20final.pdf?download=1"),
        "v1_bearer": http_request("GET", "/v1/sessions", ("Authorization: Bearer other-tenant-token",), auth=False),
        # Connections and limits.
        "pipelined": http_request("GET", "/healthz", auth=False) + http_request("GET", "/api/status") +
        http_request("GET", "/api/kernels", ("Connection: close",)),
        "http10": b"GET /api/kernelspecs HTTP/1.0\r\nAuthorization: token " + TOKEN.encode() + b"\r\n\r\n",
        "bad_escape": http_request("GET", "/api/contents/%zz"),
        "method_not_allowed": http_request("PUT", "/api/kernels", body=b"{}"),
        "no_token": http_request("GET", "/api/kernels", auth=False),
        "wrong_token": http_request("GET", "/api/kernels", ("Authorization: token nope",), auth=False),
        "static": http_request("GET", "/static/app.js", auth=False),
        "too_large_declared": http_request("POST", "/v1/execute", ("Content-Length: 999999999999",),
                                           length=False),
        "deep_json": http_request("POST", "/api/sessions", ("Content-Type: application/json",), deep_body),
        "spec_body": http_json("POST", "/api/kernels", spec),
    }


def client_hello(server_name):
    """The first flight of a TLS client, as Python's ssl (OpenSSL) sends it."""
    import ssl
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def egress_seeds():
    hello = client_hello("files.pypi.test")
    return {
        "client_hello_sni": hello,
        "client_hello_no_sni": client_hello(None),
        "client_hello_cut": hello[:60],
        "connect": b"CONNECT pypi.test:443 HTTP/1.1\r\nHost: pypi.test:443\r\n\r\n",
        "connect_v6": b"CONNECT [fd00::1]:443 HTTP/1.1\r\n\r\n",
        "absolute_get": b"GET http://api.example.com:8080/v1/x?y=1 HTTP/1.1\r\nHost: api.example.com:8080\r\n\r\n",
        "host_mismatch": b"GET http://a.example.com/ HTTP/1.1\r\nHost: bad.example.com\r\n\r\n",
        "rule_cidr": b"10.1.0.0/16:5432",
        "rule_wildcard": b"*.pythonhosted.org",
        # Found by the fuzzer: a malformed name once matched a wildcard.
        "malformed_host_on_a_wildcard": b"GT http://`.example.com/ HTTP/1.1\r\nHo \0\0\0\0\0\0\0sOrigm\r\n\r\n",
    }


def tar_seeds():
    import io
    import tarfile

    def archive(fmt, entries):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
            for name, data in entries:
                info = tarfile.TarInfo(name)
                if data is None:
                    info.type = tarfile.DIRTYPE
                    t.addfile(info)
                else:
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        return out.getvalue()

    long_name = "d" * 120 + "/" + "n" * 150 + ".txt"
    return {
        "ustar_file": archive(tarfile.USTAR_FORMAT, [("data/a.csv", b"x,y\n1,2\n")]),
        "ustar_dir": archive(tarfile.USTAR_FORMAT, [("data", None)]),
        "pax_long_name": archive(tarfile.PAX_FORMAT, [(long_name, b"long")]),
        "gnu_long_name": archive(tarfile.GNU_FORMAT, [(long_name, b"long")]),
        "pax_records": b"12 path=abc\n11 size=42\n18 mtime=1.500000\n",
    }


def connect_seeds():
    def env(obj, flags=0, length=None):
        payload = obj if isinstance(obj, bytes) else compact(obj)
        return bytes([flags]) + struct.pack(">I", len(payload) if length is None else length) + payload
    return {
        "start_process": env({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "ls"], "envs": {"A": "1"}},
                               "stdin": False}),
        "watch_dir": env({"path": "/home/user", "recursive": True}),
        "connect": env({"process": {"pid": 7}}),
        "compressed": env({"path": "/"}, flags=1),
        "short_length": env({"path": "/home/user"}, length=3),
        "not_object": env([1, 2, 3]),
        "deep": env(b"[" * 600 + b"]" * 600),
        "empty": b"",
    }


def mcp_rpc_seeds():
    def rpc(method, params=None, id_=1):
        m = {"jsonrpc": "2.0", "method": method}
        if id_ is not None:
            m["id"] = id_
        if params is not None:
            m["params"] = params
        return compact(m)
    return {
        "initialize": rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "c", "version": "1"}}),
        "tools_list": rpc("tools/list"),
        "execute_code": rpc("tools/call", {"name": "execute_code",
                                           "arguments": {"code": "print(1)", "timeout_s": 30, "session_id": "x"}}),
        "write_file": rpc("tools/call", {"name": "write_file",
                                         "arguments": {"session_id": "s", "path": "a/b.txt", "content": "hi"}}),
        "read_resource": rpc("resources/read", {"uri": "cellgate://sessions/abc/files/data/x.csv"}),
        "notification": rpc("notifications/initialized", id_=None),
        "response": b'{"jsonrpc":"2.0","id":"r1","result":{}}',
        "batch": b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        "bad_id": b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
        "deep": b"[" * 600 + b"]" * 600,
    }


def terminado_seeds():
    return {
        "stdin": b'["stdin","ls -la\r"]',
        "set_size": b'["set_size",40,120,800,600]',
        "too_big": b'["set_size",100000,2]',
        "unknown": b'["disconnect",1]',
        "deep": b"[" * 10 + b"]" * 10,
        "not_array": b'{"stdin":"x"}',
    }


def multipart_seeds():
    ct = b"multipart/form-data; boundary=XyZ\n"
    body = (b"--XyZ\r\nContent-Disposition: form-data; name=\"session\"\r\n\r\n{\"timeout_s\":30}\r\n"
            b"--XyZ\r\nContent-Disposition: form-data; name=\"workspace\"; filename=\"w.tar\"\r\n"
            b"Content-Type: application/x-tar\r\n\r\n" + b"\0" * 64 + b"\r\n--XyZ--\r\n")
    return {
        "session_and_archive": ct + body,
        "quoted_boundary": b'multipart/form-data; boundary="a b"\n--a b\r\nContent-Disposition: form-data; name="f"\r\n\r\nx\r\n--a b--\r\n',
        "no_close": ct + body[:-8],
        "no_boundary": b"multipart/form-data\n--x\r\n",
    }


def main():
    targets = {
        "tar_fuzzer": tar_seeds(),
        "egress_fuzzer": egress_seeds(),
        "ws_json_fuzzer": ws_json_seeds(),
        "ws_v1_fuzzer": ws_v1_seeds(),
        "zmq_wire_fuzzer": zmq_seeds(),
        "http_request_fuzzer": http_seeds(),
        "connect_fuzzer": connect_seeds(),
        "mcp_rpc_fuzzer": mcp_rpc_seeds(),
        "terminado_fuzzer": terminado_seeds(),
        "multipart_fuzzer": multipart_seeds(),
    }
    for target, seeds in targets.items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        # Named files are seeds from here; 40-hex names are inputs the fuzzer
        # found and fuzz/run.sh --update-corpus merged in. Those stay.
        for old in folder.iterdir():
            if not MERGED_NAME.fullmatch(old.name):
                old.unlink()
        for name, data in seeds.items():
            (folder / name).write_bytes(data)
        print(f"{target}: {len(seeds)} seeds in {folder.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
