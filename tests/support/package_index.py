"""A PEP 503 package index on loopback, serving one small pure-Python wheel
made here, and counting what is fetched: what a template's build installs
from in tests (the build reaches it only through the egress proxy, under a
name the operator maps with --egress-resolve)."""
import base64
import hashlib
import http.server
import io
import threading
import zipfile

import pytest


def make_wheel(name, version, source):
    """A pure-Python wheel, as pip installs one: the module, METADATA, WHEEL and RECORD with hashes."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": source.encode(),
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: cellgate-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{dist}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{dist}/RECORD", record)
    return f"{name}-{version}-py3-none-any.whl", buf.getvalue()


class PackageIndex:
    """A PEP 503 simple index on loopback serving one wheel, counting what is fetched."""

    def __init__(self):
        self.wheel_name, self.wheel = make_wheel("cgdemo", "1.0", "ANSWER = 42\n")
        self.fetched = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                index.fetched.append(self.path)
                if self.path.rstrip("/") == "/simple/cgdemo":
                    digest = hashlib.sha256(index.wheel).hexdigest()
                    body = (f'<html><body><a href="/files/{index.wheel_name}#sha256={digest}">'
                            f"{index.wheel_name}</a></body></html>").encode()
                    ctype = "text/html"
                elif self.path == f"/files/{index.wheel_name}":
                    body, ctype = index.wheel, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()




@pytest.fixture(scope="module")
def package_index():
    """A PackageIndex for the module's tests (import this fixture into the module)."""
    i = PackageIndex()
    yield i
    i.close()
