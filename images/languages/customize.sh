#!/bin/sh
# Finishes the languages image (images/build.sh languages): the minimal
# Debian base's steps (base-customize.sh), then each language's Jupyter
# kernel and its kernelspec. Usage: customize.sh ROOT EXTRA (EXTRA: what
# fetch.sh brought).
set -eu
root=${1:?usage: customize.sh ROOT EXTRA}
extra=${2:?usage: customize.sh ROOT EXTRA}
here=$(dirname "$0")

sh "$here/base-customize.sh" "$root"
# The Python kernel is the base's entry point; cellgate-kernel starts it, or
# another language's kernel behind the same five sockets.
install -m 0755 "$here/cellgate-kernel-python" "$root/opt/cellgate/cellgate-kernel-python"

# Deno: one binary (npm's @deno/linux-x64-glibc); its cache lives on the
# sandbox's /tmp (DENO_DIR, set by cellgate-kernel).
install -m 0755 "$extra/deno/node_modules/@deno/linux-x64-glibc/deno" "$root/usr/local/bin/deno"
# bash_kernel: a pure-Python wheel, installed without its index.
for wheel in "$extra"/wheels/*.whl; do
  name=$(basename "$wheel")
  cp "$wheel" "$root/tmp/$name"
  chroot "$root" /usr/bin/python3 -m pip install --quiet --no-deps --no-index --break-system-packages \
    --no-compile --root-user-action=ignore "/tmp/$name"
  rm -f "$root/tmp/$name"
done

# Kernelspecs: cellgate runs /opt/cellgate/cellgate-kernel in every sandbox;
# SANDBOX_KERNEL (the kernelspec's env) says which kernel it starts.
spec() {  # NAME DISPLAY LANGUAGE KERNEL INTERRUPT_MODE [CELLGATE_METADATA]
  mkdir -p "$root/usr/local/share/jupyter/kernels/$1"
  cat > "$root/usr/local/share/jupyter/kernels/$1/kernel.json" <<JSON
{
  "argv": ["/opt/cellgate/cellgate-kernel", "-f", "{connection_file}"],
  "display_name": "$2",
  "language": "$3",
  "interrupt_mode": "$5",
  "env": {"SANDBOX_KERNEL": "$4"},
  "metadata": {"debugger": false, "cellgate": {${6:-}}}
}
JSON
}
# Python with its data stack, under a name of its own: E2B's default template
# (code-interpreter-v1) runs here, so its sandboxes can open code contexts in
# R, JavaScript, TypeScript and Bash (cellgate-kernel --context).
spec code-interpreter "Python 3 with R, JS, TS and Bash contexts (cellgate sandbox)" python python signal
mkdir -p "$root/etc/matplotlib"
cat > "$root/etc/matplotlib/matplotlibrc" <<'RC'
backend: module://matplotlib_inline.backend_inline
figure.dpi: 100
RC
mkdir -p "$root/opt/cellgate/mplconfig"
chroot "$root" env MPLCONFIGDIR=/opt/cellgate/mplconfig HOME=/tmp \
  /usr/bin/python3 -c 'import matplotlib.font_manager as fm; fm._load_fontmanager(try_read_cache=False)'
spec ir "R (cellgate sandbox)" R ir signal
# Deno's kernel can publish a cell's result after its idle status.
spec javascript "JavaScript (Deno, cellgate sandbox)" javascript deno signal '"output_settle_ms": 100'
spec typescript "TypeScript (Deno, cellgate sandbox)" typescript deno signal '"output_settle_ms": 100'
spec bash "Bash (cellgate sandbox)" bash bash signal
# The one-shot runtimes' sandboxes: no cells, and not listed.
mkdir -p "$root/usr/local/share/jupyter/kernels/runs"
cat > "$root/usr/local/share/jupyter/kernels/runs/kernel.json" <<'JSON'
{
  "argv": ["/opt/cellgate/cellgate-kernel", "-f", "{connection_file}"],
  "display_name": "One-shot runs (no cells)",
  "language": "none",
  "interrupt_mode": "signal",
  "env": {"SANDBOX_KERNEL": "none"},
  "metadata": {"debugger": false, "cellgate": {"listed": false}}
}
JSON
chmod -R a+rX "$root/usr/local/share/jupyter" "$root/opt/cellgate"
# The Debian kernelspecs IRkernel and ipykernel install are not cellgate's.
rm -rf "$root/usr/share/jupyter/kernels"
chroot "$root" /usr/bin/python3 -m compileall -q /usr/local/lib/python3.11/dist-packages >/dev/null 2>&1 || true

# The one-shot runtimes (Piston's /api/v2): each language's compile and run
# scripts, with the versions the toolchains report. Scripts run in bash in
# the workspace; compile gets every file's name, run the first file's name,
# then the request's args. A file need not have its language's extension
# (Piston's clients send "file0.code"), so compilers are told the language.
v() { chroot "$root" /bin/sh -c "$1" 2>/dev/null | head -n1 | tr -d '\r'; }
export V_GCC=$(v 'gcc -dumpfullversion') V_RUST=$(v "rustc --version | cut -d' ' -f2")
export V_GO=$(v "go version | sed 's/.*go\([0-9.]*\).*/\1/'") V_JAVA=$(v "javac -version 2>&1 | cut -d' ' -f2")
export V_KOTLIN=$(v "dpkg-query -W -f='\${Version}' kotlin | sed 's/+.*//'") V_PYTHON=$(v "python3 -c 'import platform; print(platform.python_version())'")
export V_NODE=$(v "node --version | tr -d v") V_DENO=$(v "/usr/local/bin/deno --version | cut -d' ' -f2")
export V_RUBY=$(v "ruby -e 'print RUBY_VERSION'") V_PHP=$(v "php -r 'echo PHP_VERSION;'")
export V_PERL=$(v "perl -e 'print substr(\$^V, 1)'") V_LUA=$(v "lua5.4 -v | cut -d' ' -f2")
export V_BASH=$(v "bash -c 'echo \${BASH_VERSINFO[0]}.\${BASH_VERSINFO[1]}.\${BASH_VERSINFO[2]}'") V_R=$(v "Rscript -e 'cat(format(getRversion()))'")
/usr/bin/python3 - "$root/opt/cellgate/runtimes.json" <<'PY'
import json, os, sys
V = lambda name: os.environ["V_" + name] or sys.exit(f"customize.sh: no version for {name}")
binary = 'shift; exec ./binary "$@"'
ext = lambda e: 'for f in "$@"; do case "$f" in *.%s) ;; *) mv -- "$f" "$f.%s" ;; esac; done' % (e, e)
java_compile = r'''mkdir -p .cellgate/src
for f in "$@"; do
  cls=$(sed -n 's/^.*public[[:space:]]\{1,\}\([a-z]\{1,\}[[:space:]]\{1,\}\)*\(class\|interface\|enum\|record\)[[:space:]]\{1,\}\([A-Za-z_$][A-Za-z0-9_$]*\).*$/\3/p' "$f" | head -n1)
  [ -n "$cls" ] || cls=$(basename -- "${f%.*}")
  cp -- "$f" ".cellgate/src/$cls.java"
done
main=$(grep -l 'static[[:space:]].*void[[:space:]]\{1,\}main' .cellgate/src/*.java | head -n1)
basename -- "${main:-.cellgate/src/Main.java}" .java > .cellgate/main
exec javac -encoding UTF-8 -nowarn -d .cellgate/classes .cellgate/src/*.java'''
runtimes = [
    {"language": "c", "version": V("GCC"), "aliases": ["gcc"], "runtime": "gcc",
     "compile": 'exec gcc -std=gnu17 -O2 -o binary -x c "$@" -lm', "run": binary},
    {"language": "c++", "version": V("GCC"), "aliases": ["cpp", "g++"], "runtime": "gcc",
     "compile": 'exec g++ -std=gnu++20 -O2 -o binary -x c++ "$@"', "run": binary},
    {"language": "rust", "version": V("RUST"), "aliases": ["rs"],
     "compile": 'exec rustc -O --edition 2021 --crate-name main -o binary "$1"', "run": binary},
    {"language": "go", "version": V("GO"), "aliases": ["golang"],
     "compile": ext("go") + '\nexport GOCACHE=/tmp/.cache/go GOPATH=/tmp/.go GO111MODULE=off\nexec go build -o binary *.go',
     "run": binary},
    {"language": "java", "version": V("JAVA"), "aliases": [], "compile": java_compile,
     "run": 'shift; exec java -cp .cellgate/classes "$(cat .cellgate/main)" "$@"'},
    {"language": "kotlin", "version": V("KOTLIN"), "aliases": ["kt"],
     "compile": ext("kt") + '\nexec kotlinc -nowarn *.kt -include-runtime -d .app.jar 2>&1 | grep -v "^OpenJDK 64-Bit Server VM warning" >&2; [ -f .app.jar ]',
     "run": 'shift; exec java -jar .app.jar "$@"'},
    {"language": "python", "version": V("PYTHON"), "aliases": ["py", "py3", "python3"],
     "run": 'exec python3 "$@"'},
    {"language": "javascript", "version": V("NODE"), "aliases": ["node-javascript", "node-js", "javascript", "js", "node"],
     "runtime": "node", "run": 'exec node "$@"'},
    {"language": "javascript", "version": V("DENO"), "aliases": ["deno-js"], "runtime": "deno",
     "run": 'export DENO_DIR=/tmp/.deno DENO_NO_UPDATE_CHECK=1 NO_COLOR=1\nf=$1; shift; case "$f" in *.js|*.mjs) ;; *) mv -- "$f" "$f.js"; f="$f.js" ;; esac\nexec deno run -A --quiet "$f" "$@"'},
    {"language": "typescript", "version": V("DENO"), "aliases": ["ts", "deno-ts", "deno", "tsc"], "runtime": "deno",
     "compile": 'export DENO_DIR=/tmp/.deno DENO_NO_UPDATE_CHECK=1 NO_COLOR=1\n' + ext("ts") + '\nexec deno check --quiet *.ts',
     "run": 'export DENO_DIR=/tmp/.deno DENO_NO_UPDATE_CHECK=1 NO_COLOR=1\nf=$1; shift; [ -f "$f" ] || f="$f.ts"\nexec deno run -A --no-check --quiet "$f" "$@"'},
    {"language": "ruby", "version": V("RUBY"), "aliases": ["ruby3", "rb"], "run": 'exec ruby "$@"'},
    {"language": "php", "version": V("PHP"), "aliases": [], "run": 'exec php "$@"'},
    {"language": "perl", "version": V("PERL"), "aliases": ["pl"], "run": 'exec perl "$@"'},
    {"language": "lua", "version": V("LUA"), "aliases": [], "run": 'exec lua5.4 "$@"'},
    {"language": "bash", "version": V("BASH"), "aliases": ["sh"], "run": 'exec bash "$@"'},
    {"language": "rscript", "version": V("R"), "aliases": ["r"], "run": 'exec Rscript "$@"'},
]
with open(sys.argv[1], "w") as f:
    json.dump(runtimes, f, indent=1)
PY
chmod 0644 "$root/opt/cellgate/runtimes.json"
