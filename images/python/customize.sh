#!/bin/sh
# Shared finishing step for both builders: turns an installed Debian root into
# the cellgate kernel image. Usage: customize.sh ROOT   (ROOT=/ inside Docker)
# Runs before the rootfs is frozen read-only, so everything the kernel needs
# at run time that would otherwise be written lazily (pyc, font cache) is made here.
set -eu
root=${1:?usage: customize.sh ROOT}
here=$(dirname "$0")

# The non-root user the kernel runs as (uid/gid 1000 inside the user namespace).
grep -q '^kernel:' "$root/etc/group"  || echo 'kernel:x:1000:' >> "$root/etc/group"
grep -q '^kernel:' "$root/etc/passwd" || echo 'kernel:x:1000:1000:cellgate kernel:/home/user:/bin/bash' >> "$root/etc/passwd"
grep -q '^kernel:' "$root/etc/shadow" 2>/dev/null || echo 'kernel:!:19000::::::' >> "$root/etc/shadow"

# Purge build-time-only dependencies (see strip-packages.txt).
strip=$(grep -v '^[[:space:]]*#' "$here/strip-packages.txt" | tr -s '[:space:]' ' ')
installed=$(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $strip 2>/dev/null | awk '$1 ~ /^ii/ {print $2}' | tr '\n' ' ')
if [ -n "$installed" ]; then
  chroot "$root" env DEBIAN_FRONTEND=noninteractive dpkg --purge --force-depends --force-remove-essential $installed >/dev/null
fi

# Mount points the sandbox fills in (the rootfs itself is mounted read-only).
# /volumes: a per-sandbox tmpfs goes there, and a session's named volumes on it.
mkdir -p "$root/workspace" "$root/run/kernel" "$root/run/egress" "$root/volumes" "$root/opt/cellgate"
# E2B code (and its SDK's paths) expect the home at /home/user: it is the
# workspace, by a link in the read-only root that the sandbox cannot change.
mkdir -p "$root/home"
rm -rf "$root/home/user"
ln -s /workspace "$root/home/user"

# The kernel entry point and its defaults (inline PNG plots, in-memory history).
install -m 0755 "$here/cellgate-kernel" "$root/opt/cellgate/cellgate-kernel"
# A code context (E2B's createCodeContext): one more interpreter the gateway
# drives over its pipes (gateway/src/e2b/code_contexts.hpp).
install -m 0755 "$here/cellgate-context" "$root/opt/cellgate/cellgate-context"
# The egress forwarder, started by cellgate-kernel when /run/egress is mounted.
install -m 0755 "$here/cellgate-egress" "$root/opt/cellgate/cellgate-egress"
# The kernel zygote (the launcher's --zygote on): forks pre-imported kernels into sandboxes.
install -m 0755 "$here/cellgate-zygote" "$root/opt/cellgate/cellgate-zygote"
mkdir -p "$root/etc/matplotlib"
cat > "$root/etc/matplotlib/matplotlibrc" <<'RC'
backend: module://matplotlib_inline.backend_inline
figure.dpi: 100
RC

# The kernelspec, as Jupyter clients expect to find it.
mkdir -p "$root/usr/local/share/jupyter/kernels/python3"
install -m 0644 "$here/kernel.json" "$root/usr/local/share/jupyter/kernels/python3/kernel.json"

# Prebuild Matplotlib's font cache once, so no kernel spends a second on it.
mkdir -p "$root/opt/cellgate/mplconfig"
chroot "$root" env MPLCONFIGDIR=/opt/cellgate/mplconfig HOME=/tmp \
  /usr/bin/python3 -c 'import matplotlib.font_manager as fm; fm._load_fontmanager(try_read_cache=False)' \
  || chroot "$root" env MPLCONFIGDIR=/opt/cellgate/mplconfig HOME=/tmp \
  /usr/bin/python3 -c 'import matplotlib.pyplot'
chmod -R a+rX "$root/opt/cellgate"

# Strip what a kernel never reads: docs, man pages, locales, apt lists and caches.
rm -rf "$root/usr/share/doc"/* "$root/usr/share/man"/* "$root/usr/share/info"/* \
       "$root/usr/share/locale"/* "$root/usr/share/lintian" "$root/usr/share/linda" \
       "$root/var/cache/apt"/* "$root/var/lib/apt/lists"/* "$root/var/cache/debconf"/*-old \
       "$root/var/log"/* "$root/tmp"/* 2>/dev/null || true
# Test suites shipped inside scientific packages are large and never imported.
for d in "$root"/usr/lib/python3/dist-packages/*/tests "$root"/usr/lib/python3/dist-packages/*/*/tests; do
  case "$d" in
    */numpy/*|*/pandas/*|*/scipy/*|*/sklearn/*|*/matplotlib/*|*/seaborn/*|*/PIL/*|*/openpyxl/*) rm -rf "$d" ;;
  esac
done
