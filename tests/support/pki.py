"""A small CA for a test cluster (security review turn 3, H4): etcd serves
and talks to its members over TLS with client certificates, and each node,
the router and etcdctl present one signed here. EC P-256 keys: each takes a
few milliseconds. Also the cluster secret the nodes share."""
import secrets
import subprocess
from pathlib import Path


def _openssl(*args):
    r = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("openssl " + " ".join(args) + ":\n" + r.stderr)


class Pki:
    def __init__(self, directory, hosts=("127.0.0.1",), name="cellgate-test-ca"):
        """A CA in `directory`, and a certificate for the servers at `hosts`
        (IP addresses; also the DNS name localhost) that is a client one too
        (etcd's gateway dials its own gRPC with it)."""
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ca, self.ca_key = self.dir / "ca.pem", self.dir / "ca-key.pem"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", str(self.ca_key), "-out", str(self.ca), "-days", "3", "-subj", f"/CN={name}")
        self.server = self.issue("etcd", hosts)
        self.client = self.issue("node")
        self.secret = self.dir / "cluster-secret"
        self.secret.write_text(secrets.token_hex(32) + "\n")
        self.secret.chmod(0o600)

    def issue(self, name, hosts=()):
        """(certificate, key) for `name`, signed by this CA."""
        cert, key, csr, ext = (self.dir / f"{name}.pem", self.dir / f"{name}-key.pem", self.dir / f"{name}.csr",
                               self.dir / f"{name}.ext")
        sans = ",".join([f"IP:{h}" for h in hosts] + (["DNS:localhost"] if hosts else []))
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                       "extendedKeyUsage=serverAuth,clientAuth\n" + (f"subjectAltName={sans}\n" if sans else ""))
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
                 "-out", str(csr), "-subj", f"/CN={name}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
                 "-CAcreateserial", "-out", str(cert), "-days", "3", "-extfile", str(ext))
        key.chmod(0o600)
        return cert, key

    def node_args(self, secret=None):
        """A node's arguments for etcd's TLS and the cluster secret."""
        return ["--etcd-ca", str(self.ca), "--etcd-cert", str(self.client[0]), "--etcd-key", str(self.client[1]),
                "--cluster-secret-file", str(secret or self.secret)]

    def etcdctl_args(self):
        return ["--cacert", str(self.ca), "--cert", str(self.client[0]), "--key", str(self.client[1])]
