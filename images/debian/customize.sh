#!/bin/sh
# Finishes the minimal Debian base (images/build.sh debian): the kernel's
# user, the sandbox's mount points and cellgate's entry points, as in the
# Python image (images/python/customize.sh), but apt stays whole: templates
# built on this base install with it. Usage: customize.sh ROOT
set -eu
root=${1:?usage: customize.sh ROOT}
here=$(dirname "$0")

grep -q '^kernel:' "$root/etc/group"  || echo 'kernel:x:1000:' >> "$root/etc/group"
grep -q '^kernel:' "$root/etc/passwd" || echo 'kernel:x:1000:1000:cellgate kernel:/home/user:/bin/bash' >> "$root/etc/passwd"
grep -q '^kernel:' "$root/etc/shadow" 2>/dev/null || echo 'kernel:!:19000::::::' >> "$root/etc/shadow"

mkdir -p "$root/workspace" "$root/run/kernel" "$root/run/egress" "$root/volumes" "$root/opt/cellgate" "$root/home"
rm -rf "$root/home/user"
ln -s /workspace "$root/home/user"
for f in cellgate-kernel cellgate-context cellgate-egress cellgate-zygote; do
  install -m 0755 "$here/$f" "$root/opt/cellgate/$f"
done
mkdir -p "$root/usr/local/share/jupyter/kernels/python3"
install -m 0644 "$here/kernel.json" "$root/usr/local/share/jupyter/kernels/python3/kernel.json"
chmod -R a+rX "$root/opt/cellgate"

rm -rf "$root/usr/share/doc"/* "$root/usr/share/man"/* "$root/usr/share/info"/* \
       "$root/var/cache/apt"/*.bin "$root/var/lib/apt/lists"/* "$root/var/log"/* "$root/tmp"/* 2>/dev/null || true
# Byte-compile what the kernel imports once, in the image (its root is read-only at run time).
chroot "$root" /usr/bin/python3 -m compileall -q /usr/lib/python3/dist-packages >/dev/null 2>&1 || true
