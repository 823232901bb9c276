#!/usr/bin/env bash
# Installs everything cellgate needs to build, run and test, from Debian 12's
# packages only. Idempotent: when every package is present it does nothing.
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build pkg-config git ca-certificates ccache
  # the fuzz targets (fuzz/run.sh): clang with libFuzzer's runtime
  clang libclang-rt-14-dev
  libboost-dev libboost-program-options-dev libssl-dev libzmq3-dev cppzmq-dev
  nlohmann-json3-dev libspdlog-dev libfmt-dev libgtest-dev libsqlite3-dev
  # sandbox runtime
  runc runsc mmdebstrap e2fsprogs mount util-linux iproute2 procps
  # templates from registry images: pulled with skopeo, unpacked with umoci;
  # the tests push to a registry of their own on loopback (docker-registry)
  skopeo umoci docker-registry
  # the launcher's bounded runsc-on-kvm probe (setpriv --pdeathsig, nice, env)
  coreutils
  # tests: the real Jupyter wire client and pytest, on Debian's /usr/bin/python3
  python3 python3-pytest python3-jupyter-client python3-ipykernel python3-requests
  python3-websocket python3-jupyter-server python3-nbformat python3-openpyxl python3-jsonschema
  # cluster tests (issue 16): a real 3-member etcd and HAProxy, on loopback.
  # Their packaged services are not used (the tests start their own).
  etcd-server etcd-client haproxy
  # the cluster's CA and certificates (tests/support/pki.py, deploy/cellgate-cluster pki)
  openssl
  # deployment checks: the Kubernetes manifests are parsed
  python3-yaml
  # the languages image's fetch.sh: bash_kernel from PyPI, pinned by hash
  python3-pip
  # client and browser tests: Node.js with npm (the machine's nodesource build or
  # Debian's), Debian's Chromium for Playwright (never a downloaded browser)
  nodejs chromium chromium-driver fonts-dejavu-core
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: run as root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
# Debian's nodejs ships npm separately; nodesource's includes it.
command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm >/dev/null
