"""The ``cellgate`` command line: run scripts and notebooks in a sandbox.

    cellgate run script.py [--upload data.csv[:dest]]… [--download chart.png[:local]]… [--allow HOST]… [--timeout S] [--keep]
    cellgate exec SESSION_ID 'code'
    cellgate sessions
    cellgate rm SESSION_ID…
    cellgate notebook run NB.ipynb [--upload file[:dest]]… [--allow HOST]… [--output OUT.ipynb] [--allow-errors] [--download-dir D]

The gateway comes from --url/--token or $CELLGATE_URL/$CELLGATE_TOKEN.
Exit status: 0 success, 1 the code failed (error, timeout, dead kernel) or a
file could not be transferred, 2 bad usage or the gateway refused/was
unreachable, 130 interrupted.
"""
import argparse
import json
import os
import sys
from pathlib import Path

from .errors import CellgateError
from .sandbox import Sandbox, run_once

EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/svg+xml": "svg"}


def _err(msg):
    print(msg, file=sys.stderr, flush=True)


def _split_pair(spec, default_second):
    """'a:b' -> (a, b); 'a' -> (a, default_second(a)). A spec that names an
    existing local file as a whole is never split."""
    if ":" in spec and not os.path.exists(spec):
        first, second = spec.split(":", 1)
        if first and second:
            return first, second
    return spec, default_second(spec)


def _upload_spec(spec):
    return _split_pair(spec, lambda local: os.path.basename(local))


def _download_spec(spec):
    return _split_pair(spec, lambda remote: os.path.basename(remote.rstrip("/")))


class _Printer:
    """Prints an execution as it streams: output at once, results as they come,
    images saved to files."""

    def __init__(self, image_dir, prefix):
        self.image_dir = Path(image_dir)
        self.prefix = prefix
        self.images = 0

    def stdout(self, text):
        sys.stdout.write(text)
        sys.stdout.flush()

    def stderr(self, text):
        sys.stderr.write(text)
        sys.stderr.flush()

    def result(self, r):
        saved = False
        for mime, ext in EXTENSIONS.items():
            if mime in r.data:
                self.images += 1
                self.image_dir.mkdir(parents=True, exist_ok=True)
                target = self.image_dir / f"{self.prefix}-image-{self.images}.{ext}"
                content = r.svg.encode() if mime == "image/svg+xml" else (r.png if ext == "png" else r.jpeg)
                target.write_bytes(content)
                _err(f"[{mime} saved to {target}]")
                saved = True
                break
        if saved:
            return
        text = r.text if r.text is not None else (r.markdown or r.html)
        if text is not None:
            self.stdout(text if text.endswith("\n") else text + "\n")
        else:
            _err(f"[result in {', '.join(r.formats())}]")


def _report(ex):
    """Prints what a streamed execution's callbacks do not: error, status, files. Returns the exit code."""
    if ex.truncated:
        _err("[cellgate: output was truncated at the session's output limit]")
    if ex.error:
        _err(ex.error.traceback_text.rstrip("\n") or f"{ex.error.name}: {ex.error.value}")
    if ex.status == "timeout":
        _err("[cellgate: execution timed out" + ("; the kernel was restarted]" if ex.kernel_restarted else "]"))
    elif ex.status in ("interrupted", "kernel_died"):
        _err(f"[cellgate: execution {ex.status.replace('_', ' ')}]")
    for f in ex.files:
        _err(f"[{f.change or 'file'}: {f.path} ({f.size} B)]")
    return 0 if ex.status == "ok" else 1


def _network(args):
    """The session's network from --allow (None: no network, the default)."""
    return {"allow": args.allow} if args.allow else None


def _report_refused(sb):
    """Says which connections the sandbox's policy refused (why a fetch failed)."""
    for c in sb.network_log(limit=1000):
        if not c.allowed:
            _err(f"[network: refused {c.host}:{c.port}: {c.reason or 'not allowed'}]")


def _run_streaming(sb, code, timeout, printer):
    return sb.run_code(code, timeout=timeout, on_stdout=printer.stdout, on_stderr=printer.stderr,
                       on_result=printer.result)


def _read_code(arg):
    if arg == "-":
        return sys.stdin.read()
    return Path(arg).read_text()


def cmd_run_program(args, code):
    """`cellgate run --language LANG`: a one-shot program of that language."""
    stdin = Path(args.stdin).read_text() if args.stdin else ""
    res = run_once(code, url=args.url, token=args.token, timeout=args.timeout, language=args.language,
                   version=args.version, stdin=stdin, args=args.arg)
    for stage in (res.compile, res.run):
        if stage:
            sys.stdout.write(stage["stdout"])
            sys.stderr.write(stage["stderr"])
    _err(f"[{res.language} {res.version}: {res.status}, exit {res.exit_code}, "
         f"{res.usage.get('wall_s', 0):.3f} s, {res.usage.get('peak_memory_bytes', 0) // 1024} KiB]")
    code_ = res.exit_code
    return code_ if isinstance(code_, int) and code_ != 0 else (0 if res.status == "ok" else 1)


def cmd_run(args):
    code = _read_code(args.script)
    if args.language:
        if args.upload or args.download or args.template or args.keep or args.allow:
            _err("cellgate: --language runs a one-shot program: --upload, --download, --template, --keep and "
                 "--allow do not apply")
            return 2
        return cmd_run_program(args, code)
    uploads = [_upload_spec(s) for s in args.upload]
    for local, _ in uploads:
        if not os.path.isfile(local):
            _err(f"cellgate: no such file to upload: {local}")
            return 2
    prefix = "stdin" if args.script == "-" else Path(args.script).stem
    sb = Sandbox(args.url, args.token, network=_network(args), template=args.template)
    status = 0
    try:
        for local, dest in uploads:
            info = sb.upload(dest, local)
            _err(f"[uploaded {local} -> {info.path}]")
        ex = _run_streaming(sb, code, args.timeout, _Printer(args.image_dir, prefix))
        status = _report(ex)
        if args.allow:
            _report_refused(sb)
        for remote, local in (_download_spec(s) for s in args.download):
            try:
                sb.download(remote, local)
                _err(f"[downloaded {remote} -> {local}]")
            except CellgateError as e:
                _err(f"cellgate: cannot download {remote}: {e.message or e.reason}")
                status = 1
    finally:
        if args.keep:
            _err(f"[session kept: {sb.id}]")
        else:
            sb.close()
    return status


def cmd_exec(args):
    sb = Sandbox.connect(args.session_id, args.url, args.token)
    code = sys.stdin.read() if args.code == "-" else args.code
    ex = _run_streaming(sb, code, args.timeout, _Printer(args.image_dir, f"{sb.id[:8]}"))
    return _report(ex)


def cmd_sessions(args):
    sessions = Sandbox.list(args.url, args.token)
    if args.json:
        print(json.dumps([s.raw for s in sessions], indent=2))
        return 0
    if not sessions:
        _err("no sessions")
        return 0
    print(f"{'ID':36}  {'KERNEL':10} {'STATE':10} {'CREATED':27} EXPIRES")
    for s in sessions:
        print(f"{s.id:36}  {s.kernel or '':10} {s.state or '':10} {s.created or '':27} {s.expires_at or ''}")
    return 0


def _remove_each(names, remove):
    """remove(name) for each name, printing the ones removed; 1 if any failed."""
    status = 0
    for name in names:
        try:
            remove(name)
            print(name)
        except CellgateError as e:
            _err(f"cellgate: {name}: {e.message or e.reason}")
            status = 1
    return status


def cmd_rm(args):
    return _remove_each(args.session_ids, lambda sid: Sandbox.connect(sid, args.url, args.token).close())


def cmd_notebook_run(args):
    from .notebook_runner import run_notebook

    uploads = [_upload_spec(s) for s in args.upload]
    run = run_notebook(args.notebook, args.url, args.token, uploads=uploads, output=args.output,
                       allow_errors=args.allow_errors, download_dir=args.download_dir, timeout=args.timeout,
                       keep=args.keep, network=_network(args), log=lambda m: _err(f"[{m}]"))
    for index, err in run.errors:
        _err(f"cell {index} failed:\n{err['traceback_text'].rstrip() or err['ename'] + ': ' + err['evalue']}")
    if run.output_path:
        _err(f"[executed notebook saved to {run.output_path}]")
    if args.keep:
        _err(f"[session kept: {run.session_id}]")
    return 0 if run.ok else 1


def cmd_template_build(args):
    """Builds a template from a JSON definition file (as POST /v1/templates takes it), the log streamed to stderr."""
    from .templates import TemplateBuildError, build_template

    with (sys.stdin if args.definition == "-" else open(args.definition)) as f:
        d = json.load(f)
    if not isinstance(d, dict) or "name" not in d:
        _err("cellgate: a template definition is a JSON object with a name")
        return 2
    base = d.get("from", {})
    try:
        build = build_template(d["name"] if "tag" not in d else f"{d['name']}:{d['tag']}", steps=d.get("steps"),
                               packages=d.get("packages"), kernel=d.get("kernel"), resources=d.get("resources"),
                               base=base.get("image") or (f"template:{base['template']}" if "template" in base else None),
                               force=args.force or d.get("force", False), on_log=_err, url=args.url, token=args.token)
    except TemplateBuildError as e:
        _err(f"cellgate: {e.message}")
        return 1
    print(f"{build['template']}: ready ({build['built_steps']} built, {build['cached_steps']} cached)")
    return 0


def cmd_template_list(args):
    from .templates import list_templates

    templates = list_templates(args.url, args.token)
    if args.json:
        print(json.dumps(templates, indent=2))
        return 0
    if not templates:
        _err("no templates")
        return 0
    print(f"{'TEMPLATE':40} {'KERNELSPEC':44} LAYERS")
    for t in templates:
        print(f"{t['reference']:40} {t['kernelspec']:44} {t['layers']}")
    return 0


def cmd_template_rm(args):
    from .templates import delete_template

    return _remove_each(args.names, lambda name: delete_template(name, args.url, args.token))


def build_parser():
    def connection_options(default):
        parser = argparse.ArgumentParser(add_help=False)
        parser.add_argument("--url", default=default, help="gateway URL (default: $CELLGATE_URL)")
        parser.add_argument("--token", default=default, help="API token (default: $CELLGATE_TOKEN)")
        return parser

    # Accepted before or after the subcommand; the subcommand's copy must not
    # overwrite a value given before it, hence SUPPRESS there.
    common = connection_options(argparse.SUPPRESS)
    p = argparse.ArgumentParser(prog="cellgate", description="Run code in cellgate sandboxes.",
                                parents=[connection_options(None)])
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", parents=[common], help="run a script in a new sandbox")
    run.add_argument("script", help="Python file to run, or a program with --language ('-' for stdin)")
    run.add_argument("--upload", action="append", default=[], metavar="LOCAL[:DEST]",
                     help="upload a file first (DEST defaults to its base name)")
    run.add_argument("--download", action="append", default=[], metavar="REMOTE[:LOCAL]",
                     help="download a workspace file afterwards (LOCAL defaults to its base name)")
    run.add_argument("--allow", action="append", default=[], metavar="ENTRY",
                     help="let the sandbox reach this host, host:port or network (repeatable; default: no network)")
    run.add_argument("--timeout", type=float, default=None, help="execution timeout in seconds")
    run.add_argument("--template", default=None, metavar="NAME[:TAG]",
                     help="start the sandbox from one of your templates (default: the built-in image)")
    run.add_argument("--language", default=None, metavar="LANG",
                     help="run SCRIPT as a one-shot program of this language (c, rust, go, java, r, …: "
                          "GET /api/v2/runtimes) instead of Python cells")
    run.add_argument("--version", default=None, help="with --language: the runtime's version (default: newest)")
    run.add_argument("--stdin", default=None, metavar="FILE", help="with --language: the program's stdin")
    run.add_argument("--arg", action="append", default=[], metavar="ARG",
                     help="with --language: an argument for the program (repeatable)")
    run.add_argument("--keep", action="store_true", help="keep the session (prints its id)")
    run.add_argument("--image-dir", default=".", help="where displayed images are saved (default: .)")
    run.set_defaults(func=cmd_run)

    ex = sub.add_parser("exec", parents=[common], help="run code in an existing session")
    ex.add_argument("session_id")
    ex.add_argument("code", help="the code ('-' for stdin)")
    ex.add_argument("--timeout", type=float, default=None)
    ex.add_argument("--image-dir", default=".")
    ex.set_defaults(func=cmd_exec)

    ls = sub.add_parser("sessions", parents=[common], help="list your sessions")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_sessions)

    rm = sub.add_parser("rm", parents=[common], help="delete sessions")
    rm.add_argument("session_ids", nargs="+", metavar="SESSION_ID")
    rm.set_defaults(func=cmd_rm)

    tp = sub.add_parser("template", help="your environments (templates)")
    tp_sub = tp.add_subparsers(dest="template_command", required=True)
    tpb = tp_sub.add_parser("build", parents=[common], help="build a template from a JSON definition, log to stderr")
    tpb.add_argument("definition", help="the definition file ('-' for stdin), as POST /v1/templates takes it")
    tpb.add_argument("--force", action="store_true", help="build every step again")
    tpb.set_defaults(func=cmd_template_build)
    tpl = tp_sub.add_parser("list", parents=[common], help="list your templates")
    tpl.add_argument("--json", action="store_true")
    tpl.set_defaults(func=cmd_template_list)
    tpr = tp_sub.add_parser("rm", parents=[common], help="delete templates")
    tpr.add_argument("names", nargs="+", metavar="NAME[:TAG]")
    tpr.set_defaults(func=cmd_template_rm)

    nb = sub.add_parser("notebook", help="notebooks")
    nb_sub = nb.add_subparsers(dest="notebook_command", required=True)
    nbr = nb_sub.add_parser("run", parents=[common], help="execute a notebook in a new sandbox")
    nbr.add_argument("notebook")
    nbr.add_argument("--upload", action="append", default=[], metavar="LOCAL[:DEST]",
                     help="upload a file besides the notebook's declared inputs")
    nbr.add_argument("--allow", action="append", default=[], metavar="ENTRY",
                     help="let the sandbox reach this host, host:port or network (repeatable; default: no network)")
    nbr.add_argument("--output", default=None, help="executed notebook path (default: NAME.executed.ipynb)")
    nbr.add_argument("--allow-errors", action="store_true", help="run every cell even after an error")
    nbr.add_argument("--download-dir", default=None, help="download the files the cells produced here")
    nbr.add_argument("--timeout", type=float, default=None, help="timeout per cell in seconds")
    nbr.add_argument("--keep", action="store_true", help="keep the session (prints its id)")
    nbr.set_defaults(func=cmd_notebook_run)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CellgateError as e:
        _err(f"cellgate: {e}")
        return 2
    except ValueError as e:  # e.g. no URL configured
        _err(f"cellgate: {e}")
        return 2
    except KeyboardInterrupt:
        _err("cellgate: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
