"""cellgate's relay inside a gVisor sandbox (the sandbox side).

gVisor keeps the unix sockets a sandboxed process binds inside the sandbox, so
the host cannot connect to the kernel's ipc sockets. This relay starts the
kernel, then carries byte streams between the kernel's five sockets and the
host over its own stdin (host -> sandbox) and stdout (sandbox -> host), which
are pipes held by cellgate-relay on the host. The sandbox keeps no network
interface but loopback, so nothing here opens a way out.

Usage (as the container's process, under tini):
    python3 -I -S cellgate-relay.py KERNEL_ARGV...

The frame format is defined in kernel-launcher/src/relay/relay_protocol.hpp;
the two sides must agree on it byte for byte. The kernel's own stdout and
stderr go to this process's stderr (the sandbox's log), never to the pipe.
"""
import errno
import os
import selectors
import signal
import socket
import struct
import sys
import threading

HEADER = struct.Struct(">BII")  # type, stream, payload length
HELLO, READY, OPEN, DATA, CREDIT, CLOSE, RESET = 1, 2, 3, 4, 5, 6, 7
HELLO_PAYLOAD = b"cellgate-relay/1"
MAX_DATA = 64 * 1024
WINDOW = 256 * 1024
MAX_STREAMS = 64
OUT_SOFT_LIMIT = 1 << 20  # stop reading the kernel's sockets while more waits for the host
SOCKETS = ["/run/kernel/k-%d" % i for i in range(1, 6)]


class ProtocolError(Exception):
    pass


class Stream:
    __slots__ = ("sock", "send_credit", "recv_window", "grant", "out", "closing", "events")

    def __init__(self, sock):
        self.sock = sock
        self.send_credit = WINDOW  # bytes we may still send to the host
        self.recv_window = WINDOW  # bytes the host may still send us
        self.grant = 0             # delivered to the kernel, not yet granted back
        self.out = bytearray()     # bytes for the kernel's socket
        self.closing = False       # the host closed it: close once `out` is written
        self.events = 0            # what the selector watches for


class Relay:
    def __init__(self, kernel_pid, wakeup_fd, input_fd):
        self.kernel_pid = kernel_pid
        self.wakeup_fd = wakeup_fd
        self.input_fd = input_fd
        self.sel = selectors.DefaultSelector()
        self.streams = {}
        self.highest_id = 0
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.out_events = 0
        self.ready = False
        self.exit_code = None
        os.set_blocking(input_fd, False)
        self.sel.register(input_fd, selectors.EVENT_READ, "in")
        self.sel.register(wakeup_fd, selectors.EVENT_READ, "wakeup")
        self.send(HELLO, 0, HELLO_PAYLOAD)

    # -- frames to the host ------------------------------------------------
    def send(self, kind, stream, payload=b""):
        self.outbuf += HEADER.pack(kind, stream, len(payload))
        self.outbuf += payload

    def flush_grants(self):
        if len(self.outbuf) >= OUT_SOFT_LIMIT:
            return  # credit waits until the host reads: a stalled host stalls the kernel, not memory
        for sid, s in self.streams.items():
            if s.grant and (s.grant >= WINDOW // 4 or not s.out):
                self.send(CREDIT, sid, struct.pack(">I", s.grant))
                s.recv_window += s.grant
                s.grant = 0

    # -- frames from the host ----------------------------------------------
    def on_input(self):
        try:
            chunk = os.read(self.input_fd, 1 << 18)
        except BlockingIOError:
            return
        if not chunk:
            raise SystemExit("cellgate-relay: the host side closed; stopping the kernel")
        self.inbuf += chunk
        pos = 0
        while len(self.inbuf) - pos >= HEADER.size:
            kind, sid, length = HEADER.unpack_from(self.inbuf, pos)
            if length > MAX_DATA:
                raise ProtocolError("frame of %d bytes" % length)
            if len(self.inbuf) - pos - HEADER.size < length:
                break
            start = pos + HEADER.size
            payload = bytes(self.inbuf[start:start + length])
            pos = start + length
            self.on_frame(kind, sid, payload)
        del self.inbuf[:pos]

    def on_frame(self, kind, sid, payload):
        if kind == RESET and sid == 0 and not payload:
            self.reset()
            return
        if sid == 0:
            raise ProtocolError("frame type %d on stream 0" % kind)
        if kind == OPEN:
            if sid <= self.highest_id or len(payload) != 1 or payload[0] >= len(SOCKETS):
                raise ProtocolError("bad open of stream %d" % sid)
            self.highest_id = sid
            self.open(sid, SOCKETS[payload[0]])
            return
        if kind not in (DATA, CREDIT, CLOSE):
            raise ProtocolError("unexpected frame type %d" % kind)
        if sid > self.highest_id:
            raise ProtocolError("frame type %d for stream %d that was never opened" % (kind, sid))
        s = self.streams.get(sid)
        if s is None or s.closing:
            return  # a stream this side already closed: its late frames are dropped
        if kind == DATA:
            if not payload or len(payload) > s.recv_window:
                raise ProtocolError("data beyond the window on stream %d" % sid)
            s.recv_window -= len(payload)
            s.out += payload
            # Straight on to the kernel: under gVisor every system call costs
            # tens of microseconds, so no poll for writability first.
            self.on_socket(sid, selectors.EVENT_WRITE)
        elif kind == CREDIT:
            n = struct.unpack(">I", payload)[0] if len(payload) == 4 else 0
            if n == 0 or s.send_credit + n > WINDOW:
                raise ProtocolError("bad credit on stream %d" % sid)
            s.send_credit += n
        else:
            s.closing = True
            if not s.out:
                self.drop(sid, tell_host=False)

    def reset(self):
        """The host side is new: this sandbox was restored from a checkpoint
        onto new pipes. What belonged to the old host side goes: every stream
        (the kernel's ZeroMQ sees its peers leave and takes new ones), what was
        not yet written, the stream ids. Then hello and ready, as at start."""
        for sid in list(self.streams):
            self.drop(sid, tell_host=False)
        self.highest_id = 0
        del self.outbuf[:]
        self.ready = False
        self.send(HELLO, 0, HELLO_PAYLOAD)

    # -- the kernel's sockets ----------------------------------------------
    def open(self, sid, path):
        if len(self.streams) >= MAX_STREAMS:
            self.send(CLOSE, sid)
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            self.send(CLOSE, sid)  # not bound (yet): the host's ZeroMQ connects again
            return
        self.streams[sid] = Stream(sock)

    def drop(self, sid, tell_host):
        s = self.streams.pop(sid)
        if s.events:
            self.sel.unregister(s.sock)
        s.sock.close()
        if tell_host:
            self.send(CLOSE, sid)

    def on_socket(self, sid, mask):
        s = self.streams[sid]
        if mask & selectors.EVENT_WRITE and s.out:
            try:
                n = s.sock.send(s.out)
            except BlockingIOError:
                n = 0
            except OSError:
                self.drop(sid, tell_host=not s.closing)
                return
            del s.out[:n]
            s.grant += n
            if s.closing and not s.out:
                self.drop(sid, tell_host=False)
                return
        if mask & selectors.EVENT_READ and not s.closing:
            room = min(s.send_credit, MAX_DATA)
            if room > 0 and len(self.outbuf) < OUT_SOFT_LIMIT:
                try:
                    data = s.sock.recv(room)
                except BlockingIOError:
                    return
                except OSError:
                    data = b""
                if not data:
                    self.drop(sid, tell_host=True)
                    return
                s.send_credit -= len(data)
                self.send(DATA, sid, data)

    # -- the loop ----------------------------------------------------------
    def watch(self):
        """Level-triggered interest, recomputed every turn (at most 64 streams)."""
        for sid, s in self.streams.items():
            events = selectors.EVENT_WRITE if s.out else 0
            if not s.closing and s.send_credit > 0 and len(self.outbuf) < OUT_SOFT_LIMIT:
                events |= selectors.EVENT_READ
            if events != s.events:
                if s.events == 0:
                    self.sel.register(s.sock, events, sid)
                elif events == 0:
                    self.sel.unregister(s.sock)
                else:
                    self.sel.modify(s.sock, events, sid)
                s.events = events

    def check_ready(self):
        if not self.ready and all(os.path.exists(p) for p in SOCKETS):
            self.ready = True
            self.send(READY, 0)

    def reap(self):
        try:
            os.read(self.wakeup_fd, 512)
        except BlockingIOError:
            pass
        try:
            pid, status = os.waitpid(self.kernel_pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.kernel_pid, 0
        if pid == self.kernel_pid:
            self.exit_code = os.waitstatus_to_exitcode(status)

    def write_out(self):
        # Blocking: the host relay always reads (its windows bound what it
        # holds), and gVisor does not re-arm readiness events on a host pipe
        # after a restore, so nothing here waits for one.
        while self.outbuf:
            try:
                n = os.write(1, self.outbuf)
            except InterruptedError:
                continue
            except BrokenPipeError:
                raise SystemExit("cellgate-relay: the host side is gone; stopping the kernel")
            del self.outbuf[:n]

    def run(self):
        while self.exit_code is None:
            self.check_ready()
            self.flush_grants()
            if self.outbuf:
                self.write_out()
            self.watch()
            # Until the kernel's sockets exist, look for them every 10 ms.
            for key, mask in self.sel.select(timeout=None if self.ready else 0.01):
                if key.data == "in":
                    self.on_input()
                elif key.data == "wakeup":
                    self.reap()
                elif key.data in self.streams:
                    self.on_socket(key.data, mask)
        # The kernel is gone: pass on what it said last, then end the sandbox.
        try:
            os.write(1, self.outbuf)
        except OSError:
            pass
        return self.exit_code


def pump_input():
    """Copies the host's stdin pipe into a pipe of the sandbox's own, from a
    thread doing blocking reads: after a restore from a checkpoint, gVisor
    does not re-arm readiness events on a host pipe (a select on it sleeps
    through new bytes), while a blocking read and an internal pipe work."""
    r, w = os.pipe2(os.O_CLOEXEC)

    def pump():
        while True:
            try:
                chunk = os.read(0, 1 << 18)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                os.close(w)  # the host side closed: the loop sees EOF
                return
            view = memoryview(chunk)
            while view:
                try:
                    view = view[os.write(w, view):]
                except InterruptedError:
                    continue

    threading.Thread(target=pump, name="cellgate-relay-input", daemon=True).start()
    return r


def spawn_kernel(argv):
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, 2, 1)]
    # Python ignores SIGPIPE and SIGXFSZ; the kernel starts with the defaults.
    return os.posix_spawn(argv[0], argv, os.environ, file_actions=actions,
                          setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: cellgate-relay.py KERNEL_ARGV...", file=sys.stderr)
        return 2
    try:  # a name in the sandbox's process list (gVisor ignores writes to /proc/self/comm)
        import ctypes
        ctypes.CDLL(None).prctl(15, b"cellgate-relay", 0, 0, 0)  # PR_SET_NAME
    except Exception:
        pass
    # tini forwards signals to our process group, which the kernel shares: an
    # interrupt or a stop is for the kernel; this process follows it when it exits.
    # Python-level handlers (not SIG_IGN) are reset in the kernel by exec.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    kernel_pid = spawn_kernel(argv)
    relay = Relay(kernel_pid, r, pump_input())
    try:
        code = relay.run()
    except ProtocolError as e:
        print("cellgate-relay: protocol error from the host: %s" % e, file=sys.stderr)
        code = 70
    except SystemExit as e:
        print(e, file=sys.stderr)
        code = 0
    if relay.exit_code is None:
        try:
            os.kill(kernel_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return code if code >= 0 else 128 - code  # killed by signal n: 128 + n, as a shell says


if __name__ == "__main__":
    sys.exit(main())
