"""A test host of our own: a network namespace this run makes, reached from
the host by a veth pair in a 10.x /30 (the only addresses besides loopback
that a test may send to), with TCP and UDP listeners inside that count what
arrives."""
import ipaddress
import json
import random
import subprocess
import uuid

LISTENER = r"""
import json, select, socket, sys
addr = sys.argv[1]
tcp = socket.socket(); tcp.bind((addr, 0)); tcp.listen(16)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind((addr, 0))
counts = {"tcp": 0, "udp": 0}
print(json.dumps({"tcp": tcp.getsockname()[1], "udp": udp.getsockname()[1]}), flush=True)
while True:
    ready, _, _ = select.select([tcp, udp, sys.stdin], [], [])
    if tcp in ready:
        c, _ = tcp.accept(); counts["tcp"] += 1; c.close()
    if udp in ready:
        udp.recvfrom(65536); counts["udp"] += 1
    if sys.stdin in ready:
        if not sys.stdin.readline():
            break
        print(json.dumps(counts), flush=True)
"""


class NetnsHost:
    """A network namespace reached from the host by a veth pair in a 10.x /30
    that exists only on this machine, with TCP and UDP listeners inside. Its
    host end (`host_addr`) is the address of this machine a test may listen
    on besides loopback's: never the machine's own network address."""

    def __init__(self, prefix="cg-test"):
        tag = uuid.uuid4().hex[:6]
        self.name = f"{prefix}-{tag}"
        self.host_if, self.ns_if = f"cgt{tag}h", f"cgt{tag}n"
        in_use = [ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
                  for i in json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True,
                                                     check=True).stdout)
                  for a in i.get("addr_info", []) if a.get("family") == "inet"]
        while True:
            net = ipaddress.ip_network(f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/30")
            if not any(net.overlaps(n) for n in in_use):
                break
        self.host_addr, self.addr = str(net[1]), str(net[2])
        self.listener = None
        self._ip("netns", "add", self.name)
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if, "netns", self.name)
        self._ip("addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self._ip("-n", self.name, "addr", "add", f"{self.addr}/30", "dev", self.ns_if)
        self._ip("-n", self.name, "link", "set", self.ns_if, "up")
        self._ip("-n", self.name, "link", "set", "lo", "up")
        # Before any packet: the address must route into our veth, never
        # towards a default gateway.
        route = json.loads(subprocess.run(["ip", "-j", "route", "get", self.addr], capture_output=True, text=True,
                                          check=True).stdout)
        assert route and route[0].get("dev") == self.host_if, f"{self.addr} does not route into {self.host_if}: {route}"
        self.listener = subprocess.Popen(["ip", "netns", "exec", self.name, "/usr/bin/python3", "-c", LISTENER,
                                          self.addr], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ports = json.loads(self.listener.stdout.readline())
        self.tcp_port, self.udp_port = ports["tcp"], ports["udp"]

    @staticmethod
    def _ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def counts(self):
        self.listener.stdin.write("count\n")
        self.listener.stdin.flush()
        return json.loads(self.listener.stdout.readline())

    def close(self):
        if self.listener is not None:
            self.listener.stdin.close()
            try:
                self.listener.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.listener.kill()
                self.listener.wait()
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        assert self.name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert self.host_if not in links

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
