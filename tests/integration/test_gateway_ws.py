"""The kernel WebSocket against real sandboxed kernels: both framings,
subprotocol negotiation, buffers, queueing before ready, replay on reconnect,
synthesized restarting/dead status, slow clients, oversized and malformed
frames, and kernels that turn hostile."""
import json
import socket
import struct
import threading
import time
import uuid

import pytest
import requests
import websocket

from support.gateway import Gateway, KernelChannel, answer_input

V1 = "v1.kernel.websocket.jupyter.org"


@pytest.fixture(scope="module")
def gw():
    # No output cap on cells (the slow-client test sends 20 MB and counts every line).
    g = Gateway("--max-ws-queue-bytes", str(4 << 20), "--jupyter-output-limit", "0").start()
    yield g
    g.stop()
    g.cleanup()


@pytest.fixture
def kernel(gw):
    k = gw.start_kernel()
    yield k
    gw.api("DELETE", f"/api/kernels/{k['id']}")


def header(msg_type, session="s"):
    return {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": session, "username": "t",
            "version": "5.3", "date": "2026-01-01T00:00:00Z"}


def v1_encode(channel, hdr, parent, metadata, content, buffers=()):
    parts = [channel.encode(), json.dumps(hdr).encode(), json.dumps(parent).encode(),
             json.dumps(metadata).encode(), json.dumps(content).encode(), *buffers]
    n = 5 + 1 + len(buffers)  # offsets: 5 part starts (+ buffers) and the end
    offsets, pos = [], 8 * (1 + n)
    for p in parts:
        offsets.append(pos)
        pos += len(p)
    offsets.append(pos)
    return struct.pack("<Q", n) + struct.pack(f"<{n}Q", *offsets) + b"".join(parts)


def v1_decode(frame):
    n = struct.unpack_from("<Q", frame)[0]
    offsets = struct.unpack_from(f"<{n}Q", frame, 8)
    parts = [frame[offsets[i]:offsets[i + 1]] for i in range(n - 1)]
    return {"channel": parts[0].decode(), "header": json.loads(parts[1]), "parent_header": json.loads(parts[2]),
            "metadata": json.loads(parts[3]), "content": json.loads(parts[4]), "buffers": parts[5:]}


def legacy_binary_decode(frame):
    nbufs = struct.unpack_from("!I", frame)[0]
    offsets = list(struct.unpack_from(f"!{nbufs}I", frame, 4)) + [len(frame)]
    msg = json.loads(frame[offsets[0]:offsets[1]])
    msg["buffers"] = [frame[offsets[i]:offsets[i + 1]] for i in range(1, nbufs)]
    return msg


def connect(gw, kernel_id, query="", subprotocols=None, headers=None, origin=None):
    return websocket.create_connection(f"{gw.ws_url}/api/kernels/{kernel_id}/channels?{query}",
                                       subprotocols=subprotocols, header=headers or [], timeout=60, origin=origin)


def raw_upgrade(gw, kernel_id, protocols):
    """Sends a WebSocket handshake by hand; returns the status and headers."""
    import base64, os
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    req = (f"GET /api/kernels/{kernel_id}/channels?token={gw.token} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
           f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n")
    if protocols:
        req += f"Sec-WebSocket-Protocol: {', '.join(protocols)}\r\n"
    s.sendall((req + "\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    s.close()
    lines = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
    return int(lines[0].split()[1]), headers


def run_v1(ws, code, session="s"):
    h = header("execute_request", session)
    ws.send(v1_encode("shell", h, {}, {}, {"code": code, "silent": False}), opcode=websocket.ABNF.OPCODE_BINARY)
    seen, idle, replied = [], False, False
    while not (idle and replied):  # the reply (shell) and idle (iopub) come in either order
        op, data = ws.recv_data()
        assert op == websocket.ABNF.OPCODE_BINARY, "v1 frames are binary"
        m = v1_decode(data)
        if m["parent_header"].get("msg_id") != h["msg_id"]:
            continue
        seen.append(m)
        idle = idle or (m["header"]["msg_type"] == "status" and m["content"]["execution_state"] == "idle")
        replied = replied or m["header"]["msg_type"] == "execute_reply"
    return seen


# --- framings and negotiation -------------------------------------------------------------

def test_v1_is_chosen_only_when_offered_and_echoed_exactly(gw, kernel):
    ws = connect(gw, kernel["id"], f"token={gw.token}&session_id=a", subprotocols=[V1])
    assert ws.getsubprotocol() == V1
    msgs = run_v1(ws, "print('v1 ok')")
    assert any(m["header"]["msg_type"] == "stream" and m["content"]["text"] == "v1 ok\n" for m in msgs)
    assert any(m["channel"] == "shell" and m["header"]["msg_type"] == "execute_reply" for m in msgs)
    ws.close()
    # Offered something else (or nothing): the default protocol, no header.
    for offered in (["some.other.protocol"], None):
        status, headers = raw_upgrade(gw, kernel["id"], offered)
        assert status == 101 and "sec-websocket-protocol" not in headers
    status, headers = raw_upgrade(gw, kernel["id"], ["a.b", V1])
    assert status == 101 and headers["sec-websocket-protocol"] == V1


def test_a_connection_without_session_id_or_subprotocol_works(gw, kernel):
    ws = connect(gw, kernel["id"], f"token={gw.token}")
    assert ws.getsubprotocol() is None
    h = header("kernel_info_request")
    ws.send(json.dumps({"channel": "shell", "header": h, "parent_header": {}, "metadata": {}, "content": {}}))
    while True:
        m = json.loads(ws.recv())
        if m["parent_header"].get("msg_id") == h["msg_id"] and m["channel"] == "shell":
            assert m["header"]["msg_type"] == "kernel_info_reply"
            assert m["content"]["language_info"]["name"] == "python"
            break
    ws.close()


def test_buffers_arrive_in_both_framings(gw, kernel):
    code = ("k = get_ipython().kernel\n"
            "k.session.send(k.iopub_socket, 'display_data', {'data': {'text/plain': 'buf'}, 'metadata': {}},"
            " parent=k.get_parent('shell'), buffers=[b'\\x00\\x01binary', b'second'])")
    ch = KernelChannel(gw, kernel["id"])
    msg_id = ch.send("execute_request", {"code": code, "silent": False})
    frames = []
    while True:
        op, data = ch.ws.recv_data()
        if op == websocket.ABNF.OPCODE_BINARY:
            frames.append(legacy_binary_decode(data))
            continue
        m = json.loads(data)
        if m["parent_header"].get("msg_id") == msg_id and m["header"]["msg_type"] == "status" \
                and m["content"]["execution_state"] == "idle":
            break
    assert len(frames) == 1 and frames[0]["buffers"] == [b"\x00\x01binary", b"second"]
    assert frames[0]["channel"] == "iopub" and frames[0]["content"]["data"]["text/plain"] == "buf"
    ch.close()
    ws = connect(gw, kernel["id"], f"token={gw.token}", subprotocols=[V1])
    msgs = run_v1(ws, code)
    assert [m["buffers"] for m in msgs if m["header"]["msg_type"] == "display_data"] == [[b"\x00\x01binary", b"second"]]
    ws.close()


# --- lifecycle on the socket --------------------------------------------------------------

def test_messages_sent_while_the_kernel_restarts_are_queued_not_dropped(gw, kernel):
    ch = KernelChannel(gw, kernel["id"])
    ch.execute("before = 1")
    t = threading.Thread(target=lambda: gw.api("POST", f"/api/kernels/{kernel['id']}/restart", json={}))
    t.start()
    time.sleep(0.2)  # the restart is under way: the kernel is not ready
    assert gw.api("GET", f"/api/kernels/{kernel['id']}").json()["execution_state"] == "restarting"
    r = ch.execute("print('after restart', 'before' in dir())")
    assert r["stdout"] == "after restart False\n"
    t.join()
    ch.close()


def test_a_requested_restart_keeps_the_socket_working_without_claiming_an_auto_restart(gw, kernel):
    # JupyterLab reads iopub "restarting" as "the server auto-restarted the
    # kernel" and reconnects; for a restart it asked for, jupyter_server sends
    # none, and neither do we. The socket keeps working across the restart.
    ch = KernelChannel(gw, kernel["id"])
    ch.execute("x = 1")
    assert gw.api("POST", f"/api/kernels/{kernel['id']}/restart", json={}).status_code == 200
    r = ch.execute("print('x' in dir())")
    assert r["stdout"] == "False\n"
    ch.ws.settimeout(1)
    states = []
    try:
        while True:
            m = ch.recv()
            if m.get("header", {}).get("msg_type") == "status":
                states.append(m["content"]["execution_state"])
    except websocket.WebSocketTimeoutException:
        pass
    assert "restarting" not in states
    ch.close()


def test_a_dying_kernel_is_reported_dead_then_restarted(gw, kernel):
    ch = KernelChannel(gw, kernel["id"])
    ch.execute("doomed = True")
    ch.send("execute_request", {"code": "import os; os._exit(1)", "silent": False})
    states = []
    ch.ws.settimeout(30)
    while "restarting" not in states:
        m = ch.recv()
        if m.get("header", {}).get("msg_type") == "status" and not m["parent_header"]:
            states.append(m["content"]["execution_state"])
    assert states[:2] == ["dead", "restarting"], states
    deadline = time.time() + 60
    while gw.api("GET", f"/api/kernels/{kernel['id']}").json()["execution_state"] != "idle":
        assert time.time() < deadline
        time.sleep(0.2)
    assert ch.execute("print('doomed' in dir())")["stdout"] == "False\n"
    deaths = [line for line in gw.api("GET", "/metrics").text.splitlines()
              if line.startswith("cellgate_kernel_deaths_total ")]
    assert deaths and int(deaths[0].split()[1]) >= 1, deaths
    ch.close()


def test_a_reconnect_with_the_same_session_id_replays_what_was_missed(gw, kernel):
    session = uuid.uuid4().hex
    ch = KernelChannel(gw, kernel["id"], session_id=session)
    msg_id = ch.send("execute_request", {"code": "import time; time.sleep(1.5); print('while you were away')",
                                         "silent": False})
    time.sleep(0.3)
    ch.close()
    time.sleep(2.5)
    ch = KernelChannel(gw, kernel["id"], session_id=session)
    got = {"stream": None, "reply": None}
    ch.ws.settimeout(10)
    while got["stream"] is None or got["reply"] is None:
        m = ch.recv()
        if m.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if m["header"]["msg_type"] == "stream":
            got["stream"] = m["content"]["text"]
        if m["header"]["msg_type"] == "execute_reply":
            got["reply"] = m["content"]["status"]
    assert got == {"stream": "while you were away\n", "reply": "ok"}
    ch.close()


def test_a_slow_client_is_closed_with_1013_and_loses_nothing(gw, kernel, monkeypatch):
    # Debian's websocket-client predates 1013 (Try Again Later) in its list of
    # valid close codes; browsers and Node's ws accept it.
    valid = websocket.ABNF._is_valid_close_status
    monkeypatch.setattr(websocket.ABNF, "_is_valid_close_status", lambda self, code: code == 1013 or valid(self, code))
    session = uuid.uuid4().hex
    ch = KernelChannel(gw, kernel["id"], session_id=session)
    # 400 separate stream messages of 50 kB (flushed one by one): 20 MB, far
    # more than the socket buffers and the gateway's 4 MiB limit hold.
    code = ("import sys\nfor i in range(400):\n    print(str(i).rjust(6) + 'x' * 50000); sys.stdout.flush()\n"
            "print('END')")
    msg_id = ch.send("execute_request", {"code": code, "silent": False})
    time.sleep(8)  # not reading
    lines, closed_with = [], None

    def take(m):
        if m.get("parent_header", {}).get("msg_id") == msg_id and m["header"]["msg_type"] == "stream":
            lines.extend(l for l in m["content"]["text"].splitlines() if l.strip())

    ch.ws.settimeout(30)
    try:
        while True:
            op, data = ch.ws.recv_data(control_frame=True)
            if op == websocket.ABNF.OPCODE_CLOSE:
                closed_with = struct.unpack("!H", data[:2])[0]
                break
            if op == websocket.ABNF.OPCODE_TEXT:
                take(json.loads(data))
    except websocket.WebSocketConnectionClosedException:
        pass
    assert closed_with == 1013
    first = len(lines)
    ch = KernelChannel(gw, kernel["id"], session_id=session)
    ch.ws.settimeout(60)
    while "END" not in lines:
        take(ch.recv())
    numbers = [int(l[:6]) for l in lines if l != "END"]
    assert numbers == list(range(400)), f"lost or repeated lines (first connection got {first})"
    assert 0 < first < 400
    assert "cellgate_ws_slow_client_closes_total 1" in gw.api("GET", "/metrics").text
    ch.close()


# --- bad input on the socket --------------------------------------------------------------

def test_websocket_auth_and_origin(gw, kernel):
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(gw, kernel["id"])
    assert e.value.status_code == 401
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(gw, kernel["id"], "token=wrong")
    assert e.value.status_code == 403
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(gw, kernel["id"], f"token={gw.token}", origin="https://evil.example")
    assert e.value.status_code == 403
    with pytest.raises(websocket.WebSocketBadStatusException) as e:  # two Origin headers: ambiguous
        connect(gw, kernel["id"], f"token={gw.token}", headers=["Origin: https://evil.example"])
    assert e.value.status_code == 403
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        connect(gw, str(uuid.uuid4()), f"token={gw.token}")
    assert e.value.status_code == 404
    ok = connect(gw, kernel["id"], headers=[f"Authorization: token {gw.token}"], origin=f"http://127.0.0.1:{gw.port}")
    ok.close()


def test_non_json_and_unknown_channel_frames_get_an_error_and_the_connection_lives(gw, kernel):
    ch = KernelChannel(gw, kernel["id"])
    bad = ["not json at all", json.dumps([1, 2]), json.dumps({"channel": "nope", "header": header("x"), "content": {}}),
           json.dumps({"channel": "iopub", "header": header("stream"), "content": {}}),
           json.dumps({"channel": "shell", "header": {"msg_type": 5}, "content": {}})]
    for frame in bad:
        ch.ws.send(frame)
        m = ch.recv()
        while m.get("channel") != "gateway":
            m = ch.recv()
        assert m["header"]["msg_type"] == "gateway_error" and m["content"]["message"]
    ch.ws.send_binary(b"\x00\x00\x00\x09garbage")
    while ch.recv().get("channel") != "gateway":
        pass
    assert ch.execute("print('alive')")["stdout"] == "alive\n"
    ch.close()


def test_a_64_mib_message_is_closed_with_1009_and_the_server_lives(gw, kernel):
    ws = connect(gw, kernel["id"], f"token={gw.token}")
    payload = json.dumps({"channel": "shell", "header": header("execute_request"), "parent_header": {},
                          "metadata": {}, "content": {"code": "#" + "x" * (64 << 20)}})
    code = None
    try:
        ws.send(payload)
        while True:
            op, data = ws.recv_data(control_frame=True)
            if op == websocket.ABNF.OPCODE_CLOSE:
                code = struct.unpack("!H", data[:2])[0]
                break
    except (websocket.WebSocketConnectionClosedException, BrokenPipeError, ConnectionResetError):
        pass
    assert code in (1009, None)  # the close frame may be lost if the send is cut off
    assert gw.alive()
    ch = KernelChannel(gw, kernel["id"])
    assert ch.execute("print(1)")["stdout"] == "1\n"
    ch.close()


def test_a_hostile_kernel_cannot_hurt_the_gateway_or_other_kernels(gw):
    """User code takes over its kernel's iopub socket and sends truncated
    multiparts, unsigned and mis-signed messages, malformed JSON, a huge frame
    and a flood; the gateway drops them all and keeps serving."""
    victim, hostile = gw.start_kernel(), gw.start_kernel()
    try:
        before = gw.api("GET", "/metrics").text
        attack = r'''
import zmq, json, hmac, hashlib, time
k = get_ipython().kernel
sock = k.iopub_thread.socket
key = k.session.key
def sign(parts):
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts: h.update(p)
    return h.hexdigest().encode()
hdr = json.dumps({"msg_id": "x", "msg_type": "stream", "session": "s", "username": "u", "version": "5.3"}).encode()
good = [hdr, b"{}", b"{}", json.dumps({"name": "stdout", "text": "forged\n"}).encode()]
attacks = [
    [b"stream"],                                   # topic only
    [b"stream", b"<IDS|MSG>"],                     # truncated after the delimiter
    [b"stream", b"<IDS|MSG>", sign(good), hdr],    # truncated parts
    [b"stream", b"<IDS|MSG>", b"0" * 64] + good,   # bad signature
    [b"stream", b"<IDS|MSG>", b""] + good,         # unsigned
    [b"stream", b"<IDS|MSG>", sign([b"{bad", b"{}", b"{}", b"{}"]), b"{bad", b"{}", b"{}", b"{}"],  # signed garbage
    [b"stream", b"<IDS|MSG>", sign([b"[]", b"{}", b"{}", b"{}"]), b"[]", b"{}", b"{}", b"{}"],      # wrong schema
    [b"stream", b"<IDS|MSG>", sign(good)] + good + [b"x"] * 200,                                     # too many frames
    [b"x" * (80 << 20)],                           # a frame past the size limit
]
def fire():
    for a in attacks:
        sock.send_multipart(a)
    for i in range(20000):
        sock.send_multipart([b"stream", b"<IDS|MSG>", b"f" * 64] + good)
k.iopub_thread.schedule(fire)
time.sleep(3)
print("attacked")
'''
        victim_ch = KernelChannel(gw, victim["id"])
        hostile_ch = KernelChannel(gw, hostile["id"])
        hostile_ch.send("execute_request", {"code": attack, "silent": False})
        # The other kernel keeps serving while the attack runs.
        for i in range(5):
            assert victim_ch.execute(f"print({i} * 2)")["stdout"] == f"{i * 2}\n"
        hostile_ch.ws.settimeout(60)
        forged = False
        deadline = time.time() + 60
        while time.time() < deadline:
            m = hostile_ch.recv()
            if m.get("header", {}).get("msg_type") == "stream" and m["content"].get("text") == "forged\n":
                forged = True
            if m.get("header", {}).get("msg_type") == "execute_reply":
                break
        assert not forged, "an unsigned or mis-signed message reached a client"
        assert gw.alive()
        after = gw.api("GET", "/metrics").text
        dropped = int([l for l in after.splitlines() if l.startswith("cellgate_kernel_messages_dropped_total")][0].split()[1])
        assert dropped >= 8, after
        assert victim_ch.execute("print('still fine')")["stdout"] == "still fine\n"
        victim_ch.close()
        hostile_ch.close()
    finally:
        gw.api("DELETE", f"/api/kernels/{victim['id']}")
        gw.api("DELETE", f"/api/kernels/{hostile['id']}")


def test_sigterm_stops_accepting_closes_sockets_and_stops_kernels():
    g = Gateway().start()
    try:
        k = g.start_kernel()
        ch = KernelChannel(g, k["id"])
        assert ch.execute("print(1)")["stdout"] == "1\n"
        assert g.stop() == 0
        code = None
        try:
            while code is None:
                op, data = ch.ws.recv_data(control_frame=True)
                if op == websocket.ABNF.OPCODE_CLOSE:
                    code = struct.unpack("!H", data[:2])[0]
        except websocket.WebSocketConnectionClosedException:
            code = "dropped"
        assert code == 1001, "the client is told the server is going away"
        import subprocess
        from support.prerequisites import BUILD, IMAGE_STORE
        ps = subprocess.run([str(BUILD / "bin" / "cellgate-launch"), "--state-dir", str(g.state_dir), "--image-store",
                             str(IMAGE_STORE), "--workspace-root", str(g.workspace_root), "ps", "--json"],
                            capture_output=True, text=True)
        assert json.loads(ps.stdout) == [], "no sandbox outlives the gateway"
        with pytest.raises(requests.ConnectionError):
            requests.get(g.url + "/healthz", timeout=5)
    finally:
        g.cleanup()


INPUT_CELL = 'name = input("name? ")\nprint("hello", name)'


def test_input_reaches_the_client_on_stdin_in_the_json_protocol(gw, kernel):
    """A cell that calls input() with allow_stdin gets its input_request to the
    client on the stdin channel, and the client's input_reply back to the
    kernel; the next cell runs normally."""
    ch = KernelChannel(gw, kernel["id"])
    try:
        def send(channel, msg_type, content, parent):
            ch.ws.send(json.dumps({"channel": channel, "header": header(msg_type, ch.session_id),
                                   "parent_header": parent, "metadata": {}, "content": content}))
        msg_id = ch.send("execute_request", {"code": INPUT_CELL, "silent": False, "store_history": True,
                                             "user_expressions": {}, "allow_stdin": True, "stop_on_error": True})
        ch.ws.settimeout(60)
        prompt, stdout, reply = answer_input(send, ch.recv, msg_id, "cellgate")
        assert prompt == "name? "
        assert reply["status"] == "ok", reply
        assert stdout == "hello cellgate\n"
        assert ch.execute("print(name)")["stdout"] == "cellgate\n"
    finally:
        ch.close()


def test_input_reaches_the_client_on_stdin_in_the_v1_protocol(gw, kernel):
    ws = websocket.create_connection(
        f"{gw.ws_url}/api/kernels/{kernel['id']}/channels?session_id={uuid.uuid4().hex}&token={gw.token}",
        subprotocols=[V1], timeout=60)
    try:
        def send(channel, msg_type, content, parent):
            ws.send_binary(v1_encode(channel, header(msg_type), parent, {}, content))

        def recv():
            return v1_decode(ws.recv())
        hdr = header("execute_request")
        ws.send_binary(v1_encode("shell", hdr, {}, {}, {"code": INPUT_CELL, "silent": False, "store_history": True,
                                                        "user_expressions": {}, "allow_stdin": True,
                                                        "stop_on_error": True}))
        prompt, stdout, reply = answer_input(send, recv, hdr["msg_id"], "v1 client")
        assert prompt == "name? "
        assert reply["status"] == "ok", reply
        assert stdout == "hello v1 client\n"
    finally:
        ws.close()
