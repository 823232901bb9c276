"""A container registry on loopback (Debian's docker-registry, the
reference distribution server) with images this test pushes to it: what a
template's registry base is pulled from in tests. Images are made from a
root filesystem with umoci and pushed with skopeo, plain HTTP."""
import socket
import subprocess
import time

import pytest


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    def __init__(self, workdir):
        self.dir = workdir
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        (workdir / "registry.yml").write_text(
            "version: 0.1\nlog:\n  level: error\n"
            f"storage:\n  filesystem:\n    rootdirectory: {workdir / 'data'}\n"
            f"http:\n  addr: {self.host}\n")
        self.log = open(workdir / "registry.log", "wb")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(workdir / "registry.yml")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.close()
        raise RuntimeError("docker-registry did not start: " + (workdir / "registry.log").read_text()[-2000:])

    def push_rootfs(self, rootfs, repository, env=(), exclude=(), workdir=None, user=None):
        """An image of one layer holding `rootfs` but the paths matching `exclude`
        (tar's patterns), with `env`, `workdir` and `user` in its config, pushed
        as <host>/<repository>; returns that reference."""
        layout = self.dir / ("layout-" + repository.replace("/", "-").replace(":", "-"))
        layer = self.dir / "layer.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(layer), *(f"--exclude={e}" for e in exclude), "."],
                       check=True)
        subprocess.run(["umoci", "init", "--layout", str(layout)], check=True)
        subprocess.run(["umoci", "new", "--image", f"{layout}:img"], check=True)
        subprocess.run(["umoci", "raw", "add-layer", "--image", f"{layout}:img", str(layer)], check=True)
        config = ["umoci", "config", "--image", f"{layout}:img"]
        for e in env:
            config.append(f"--config.env={e}")
        if workdir:
            config.append(f"--config.workingdir={workdir}")
        if user:
            config.append(f"--config.user={user}")
        subprocess.run(config, check=True)
        layer.unlink()
        ref = f"{self.host}/{repository}"
        subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
                        f"oci:{layout}:img", f"docker://{ref}"], check=True)
        return ref

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def oci_registry(tmp_path_factory):
    """A Registry for the module's tests (import this fixture into the module)."""
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.close()
