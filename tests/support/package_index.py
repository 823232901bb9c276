"""A PEP 503 package index, a flat apt repository and an npm registry on
loopback, serving one small pure-Python wheel, one Debian package and one
npm package made here, and counting what is fetched: what a template's
build installs from in tests (the build reaches it only through the egress
proxy, under a name the operator maps with --egress-resolve; apt finds it
by --template-apt-sources, npm by --template-npm-registry)."""
import base64
import hashlib
import http.server
import io
import json
import tarfile
import threading
import time
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


def _tar_gz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(path)
            info.mode = mode
            info.mtime = int(time.time())
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _ar(members):
    out = b"!<arch>\n"
    for name, data in members:
        out += f"{name:<16}{int(time.time()):<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return out


def make_deb(name, version, script):
    """A Debian package (an ar of debian-binary, control and data), as dpkg installs one: /usr/bin/<name>."""
    control = (f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
               "Maintainer: cellgate tests <tests@cellgate.invalid>\n"
               f"Description: {name}, a tool a template installs in tests\n").encode()
    data = _tar_gz({"./": (None, 0o755), "./usr/": (None, 0o755), "./usr/bin/": (None, 0o755),
                    f"./usr/bin/{name}": (script.encode(), 0o755)})
    deb = _ar([("debian-binary", b"2.0\n"), ("control.tar.gz", _tar_gz({"./control": (control, 0o644)})),
               ("data.tar.gz", data)])
    return f"{name}_{version}_all.deb", deb, control


def make_npm_package(name, version, files):
    """An npm package tarball (package/… in a .tgz) and its packument entry's dist (shasum, integrity)."""
    tgz = _tar_gz({f"package/{path}": (data.encode(), 0o644) for path, data in files.items()})
    dist = {"shasum": hashlib.sha1(tgz).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}
    return f"{name}-{version}.tgz", tgz, dist


NPM_PACKAGE = "cg-greet"
NPM_PACKAGE_JSON = {"name": NPM_PACKAGE, "version": "1.0.0", "main": "index.js",
                    "bin": {NPM_PACKAGE: "bin/cg-greet.js"}, "license": "MIT"}


class PackageIndex:
    """A PEP 503 simple index (/simple/), a flat apt repository (/apt/) and
    an npm registry (/npm/) on loopback, serving one package each, counting
    what is fetched."""

    def __init__(self):
        self.wheel_name, self.wheel = make_wheel("cgdemo", "1.0", "ANSWER = 42\n")
        self.deb_name, self.deb, control = make_deb("cgtool", "1.0", "#!/bin/sh\necho cgtool 1.0 says hello\n")
        self.apt_packages = (control.decode() + f"Filename: ./{self.deb_name}\nSize: {len(self.deb)}\n"
                             f"SHA256: {hashlib.sha256(self.deb).hexdigest()}\n\n").encode()
        self.apt_release = ("Origin: cellgate-tests\nLabel: cellgate-tests\nSuite: stable\nCodename: cellgate\n"
                            f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S UTC', time.gmtime())}\n"
                            "Architectures: all amd64\nSHA256:\n"
                            f" {hashlib.sha256(self.apt_packages).hexdigest()} {len(self.apt_packages)} Packages\n").encode()
        self.npm_name, self.npm_tgz, self.npm_dist = make_npm_package(NPM_PACKAGE, "1.0.0", {
            "package.json": json.dumps(NPM_PACKAGE_JSON),
            "index.js": "exports.greet = (who) => `cg-greet 1.0.0 greets ${who}`;\n",
            "bin/cg-greet.js": "#!/usr/bin/env node\nconsole.log(require('../index.js').greet(process.argv[2] || 'you'));\n"})
        self.fetched = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.path = self.path.replace("/./", "/")  # apt asks a flat repository for "/apt/./Packages"
                index.fetched.append(self.path)
                if self.path.rstrip("/") == "/simple/cgdemo":
                    digest = hashlib.sha256(index.wheel).hexdigest()
                    body = (f'<html><body><a href="/files/{index.wheel_name}#sha256={digest}">'
                            f"{index.wheel_name}</a></body></html>").encode()
                    ctype = "text/html"
                elif self.path == f"/files/{index.wheel_name}":
                    body, ctype = index.wheel, "application/octet-stream"
                elif self.path == "/apt/Release":
                    body, ctype = index.apt_release, "text/plain"
                elif self.path == "/apt/Packages":
                    body, ctype = index.apt_packages, "text/plain"
                elif self.path == f"/apt/{index.deb_name}":
                    body, ctype = index.deb, "application/vnd.debian.binary-package"
                elif self.path == f"/npm/{NPM_PACKAGE}":
                    # The packument: its tarball under the name the client asked by (the proxy's mapping).
                    tarball = f"http://{self.headers.get('Host')}/npm/{NPM_PACKAGE}/-/{index.npm_name}"
                    version = dict(NPM_PACKAGE_JSON, dist=dict(index.npm_dist, tarball=tarball))
                    body = json.dumps({"name": NPM_PACKAGE, "dist-tags": {"latest": "1.0.0"},
                                       "versions": {"1.0.0": version}}).encode()
                    ctype = "application/json"
                elif self.path == f"/npm/{NPM_PACKAGE}/-/{index.npm_name}":
                    body, ctype = index.npm_tgz, "application/octet-stream"
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
