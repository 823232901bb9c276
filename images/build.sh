#!/usr/bin/env bash
# Builds the kernel image's root filesystem from Debian packages with mmdebstrap,
# or reuses the cached build. The cache key is derived from everything that
# shapes the image (package list, finishing script, entry point, kernelspec,
# this script), so an unchanged image is never rebuilt.
#
#   images/build.sh [IMAGE]          IMAGE defaults to "python"
#
# Environment: CELLGATE_IMAGE_STORE (default /var/cache/cellgate/images),
#              CELLGATE_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# The last line printed is the image's rootfs path. The store also gets a
# symlink IMAGE/current → that build, which is how the launcher finds it.
set -euo pipefail
image=${1:-python}
here=$(cd "$(dirname "$0")" && pwd)
src="$here/$image"
[[ -f "$src/packages.txt" ]] || { echo "build.sh: no image '$image' (no $src/packages.txt)" >&2; exit 2; }
store=${CELLGATE_IMAGE_STORE:-/var/cache/cellgate/images}
mirror=${CELLGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${CELLGATE_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}

# Every file in the image's directory (links followed), by name and content.
key=$( { for f in $(cd "$src" && ls -A | LC_ALL=C sort); do
           if [[ -f "$src/$f" ]]; then echo "== $f"; cat "$src/$f"; fi
         done
         cat "$0"; echo "$mirror $security"; } | sha256sum | cut -c1-16 )
dest="$store/$image/$key"
if [[ -f "$dest/.complete" ]]; then
  echo "build.sh: image $image is cached ($key)" >&2
else
  command -v mmdebstrap >/dev/null || { echo "build.sh: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2; exit 2; }
  mkdir -p "$store/$image"
  tmp=$(mktemp -d "$store/$image/.build-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # What an image takes from registries other than Debian's (pinned by its
  # fetch.sh) is brought first; customize.sh gets it as its second argument.
  mkdir -p "$tmp/extra"
  if [[ -x "$src/fetch.sh" ]]; then
    "$src/fetch.sh" "$tmp/extra" >&2
  fi
  packages=$(grep -v '^[[:space:]]*#' "$src/packages.txt" | tr -s '[:space:]' ',' | sed 's/^,//; s/,$//')
  start=$(date +%s)
  echo "build.sh: building image $image ($key) with mmdebstrap; this takes a few minutes" >&2
  mmdebstrap --variant=essential --mode=root \
    --include="$packages" \
    --aptopt='Apt::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --essential-hook='mkdir -p "$1/usr/share/man/man1"' \
    --customize-hook="sh '$src/customize.sh' \"\$1\" '$tmp/extra'" \
    bookworm "$tmp/rootfs" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb $security bookworm-security main" >&2
  # Mount points the sandbox binds over; mmdebstrap empties /run, so they are
  # (re)made here and checked: runc must never have to create one in the image.
  mkdir -p "$tmp/rootfs/run/kernel" "$tmp/rootfs/run/egress" "$tmp/rootfs/workspace" "$tmp/rootfs/volumes"
  for p in run/kernel run/egress workspace volumes tmp proc sys dev opt/cellgate/cellgate-kernel usr/bin/tini; do
    [[ -e "$tmp/rootfs/$p" ]] || { echo "build.sh: the image lacks /$p" >&2; exit 1; }
  done
  chmod 0755 "$tmp" "$tmp/rootfs"
  du -sb "$tmp/rootfs" | cut -f1 > "$tmp/size_bytes"
  echo $(( $(date +%s) - start )) > "$tmp/build_seconds"
  rm -rf "$tmp/extra"
  cp "$src/packages.txt" "$tmp/packages.txt"
  touch "$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  trap - EXIT
  echo "build.sh: built in $(cat "$dest/build_seconds") s, $(( $(cat "$dest/size_bytes") / 1048576 )) MiB" >&2
fi
ln -sfn "$key" "$store/$image/current"
# Older builds stay: a running sandbox may still use one; delete an old key
# directory by hand once no sandbox uses it.
echo "$dest/rootfs"
