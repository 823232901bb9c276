"""Templates: your own environments, built once into cached layers and
started by name (the gateway's docs/templates.md).

    from cellgate import Sandbox, build_template
    build_template("analytics:v1", packages={"pip": ["duckdb==1.1.3"]},
                   steps=["python3 -c 'import duckdb'"], on_log=print)
    with Sandbox(template="analytics:v1") as sb:
        sb.run_code("import duckdb")
"""
import hashlib
import io
import json
import os
import tarfile

from ._http import Client, close_response, iter_sse, quote_path
from .errors import CellgateError, NotFound


class TemplateNotFound(NotFound):
    """404 on a template: never built by this token's tenant, or deleted."""


class TemplateBuildError(CellgateError):
    """A template's build failed. ``failure`` is the gateway's account of it:
    ``{"step": {"index", "type"}, "exit_code", "message", "log_tail"}``;
    ``build`` the whole build model (its ``logs`` included)."""

    def __init__(self, build):
        self.build = build
        self.failure = build.get("failure") or {}
        super().__init__(None, "build_failed", self.failure.get("message", "the build failed"))


def copy(src, dest, owner=None, mode=None):
    """A COPY step: ``src`` (a path or glob in ``files``) to ``dest`` in the
    image, owned by ``owner`` ("root", "user" or a uid; default the current
    USER) with file mode ``mode`` (e.g. 0o644)."""
    args = [src, dest, owner or "", format(mode, "04o") if mode is not None else ""]
    while args and args[-1] == "":
        args.pop()
    return {"type": "COPY", "args": args}


def _step(s):
    """A step: a dict as the gateway takes it, or a string (a RUN as root)."""
    if isinstance(s, str):
        return {"type": "RUN", "args": [s]}
    return dict(s)


def _archive(files):
    """``files`` as a gzip'd tar: a directory's contents, or bytes of a tar already."""
    if isinstance(files, (bytes, bytearray)):
        return bytes(files)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for entry in sorted(os.listdir(files)):
            tar.add(os.path.join(files, entry), arcname=entry)
    return buf.getvalue()


def upload_files(files, url=None, token=None):
    """Uploads ``files`` (a directory, or a tar archive's bytes) for COPY steps
    and Dockerfiles; returns its key (derived from its bytes: the same files
    are uploaded once)."""
    client = Client(url, token)
    data = _archive(files)
    key = "py-" + hashlib.sha256(data).hexdigest()[:48]
    try:
        client.request("GET", f"/v1/templates/files/{key}")
    except NotFound:
        client.request("PUT", f"/v1/templates/files/{key}", body=data,
                       headers={"Content-Type": "application/octet-stream"}, timeout=600)
    return key


def build_template(name, *, steps=None, packages=None, base=None, kernel=None, resources=None, force=False, tags=None,
                   files=None, dockerfile=None, build_args=None, start_cmd=None, ready_cmd=None,
                   on_log=None, url=None, token=None, timeout=1800):
    """Builds template ``name`` ("name" or "name:tag") and waits for it.

    ``steps``: RUN commands (strings) or step dicts (``{"type": "ENV", "args":
    ["K", "V"]}``, WORKDIR, USER); ``packages``: ``{"apt": [...], "pip": [...],
    "npm": [...]}``, installed ahead of the steps; ``base``: a built-in image
    ("python", the default; "debian"; "node"), another template of yours
    ("template:name:tag") or an image in a registry the operator names
    ("oci:host/repo:tag"); ``files``: a directory (or a tar's bytes) the COPY
    steps (``copy(src, dest)``) and the Dockerfile copy from, uploaded first;
    ``dockerfile``: a single-stage Dockerfile's text in place of ``steps``,
    with ``build_args``; ``start_cmd``, ``ready_cmd``: run in each sandbox
    before its kernel, which starts once ``ready_cmd`` exits 0;
    ``kernel``: ``{"preload": [...], "pool": n}``; ``resources``:
    ``{"cpu_millis", "memory_bytes", "workspace_bytes"}``; ``tags``: more
    tags that name the build once it is ready (``tag_template``); ``force`` builds
    every step again. ``on_log(line)`` gets the build's log as it comes.
    Returns the build model (``cached_steps``, ``built_steps``, ``logs``);
    raises TemplateBuildError when a step fails, CellgateError 400 for a bad
    definition, 429 or 413 past the tenant's caps."""
    body = {"name": name}
    if base:
        if base.startswith("template:"):
            body["from"] = {"template": base[len("template:"):]}
        elif base.startswith("oci:"):
            body["from"] = {"oci": base[len("oci:"):]}
        else:
            body["from"] = {"image": base}
    files_key = upload_files(files, url, token) if files is not None else None
    if dockerfile is not None:
        body["dockerfile"] = dockerfile
        if files_key:
            body["files"] = files_key
        if build_args:
            body["build_args"] = build_args
    for field, value in (("start_cmd", start_cmd), ("ready_cmd", ready_cmd)):
        if value is not None:
            body[field] = value
    for key, value in (("packages", packages), ("kernel", kernel), ("resources", resources)):
        if value is not None:
            body[key] = value
    if steps is not None:
        body["steps"] = [_step(s) for s in steps]
        for s in body["steps"]:
            if s.get("type", "").upper() == "COPY" and "files" not in s:
                if files_key is None:
                    raise ValueError("a COPY step copies from files=: give build_template the directory")
                s["files"] = files_key
    if force:
        body["force"] = True
    if tags:
        body["tags"] = [tags] if isinstance(tags, str) else list(tags)
    client = Client(url, token)
    started = client.request("POST", "/v1/templates", json_body=body, timeout=120)
    at = started["status_url"]
    resp = client.open("GET", at, headers={"Accept": "text/event-stream"}, timeout=timeout)
    try:
        for event, data in iter_sse(resp):
            if event == "log" and on_log is not None:
                on_log(json.loads(data)["log"])
            elif event == "end":
                break
    finally:
        close_response(resp)
    build = client.request("GET", at)
    if build["status"] != "ready":
        raise TemplateBuildError(build)
    return build


def list_templates(url=None, token=None):
    """Your templates (the gateway's models: name, tag, kernelspec, image, env, definition)."""
    return (Client(url, token).request("GET", "/v1/templates") or {}).get("templates", [])


def get_template(name, url=None, token=None):
    """One of your templates by "name" or "name:tag"; TemplateNotFound otherwise."""
    return Client(url, token).request("GET", f"/v1/templates/{quote_path(name)}", not_found=TemplateNotFound)


def delete_template(name, url=None, token=None):
    """Deletes one of your templates ("name" is its "latest" tag); its sessions run on until they end."""
    Client(url, token).request("DELETE", f"/v1/templates/{quote_path(name)}", not_found=TemplateNotFound,
                               timeout=120)


def tag_template(name, tags, url=None, token=None):
    """Points ``tags`` (a tag or a list) at what template ``name`` ("name:tag")
    is: the same build and layers, no step run; a tag that named another
    build moves. Returns ``{"build_id", "tags"}``; TemplateNotFound when
    ``name`` is not yours."""
    tags = [tags] if isinstance(tags, str) else list(tags)
    return Client(url, token).request("POST", f"/v1/templates/{quote_path(name)}/tags", json_body={"tags": tags},
                                      not_found=TemplateNotFound, timeout=120)


def template_tags(name, url=None, token=None):
    """The tags of your template ``name``: ``[{"tag", "build_id", "created_at_ms"}]``."""
    return Client(url, token).request("GET", f"/v1/templates/{quote_path(name)}/tags",
                                      not_found=TemplateNotFound)["tags"]
