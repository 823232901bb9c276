#!/usr/bin/env bash
# Quick start, step 1 of 2: installs the dependencies, builds cellgate, builds
# (or reuses) the kernel image, then starts cellgate on 127.0.0.1:8888 with its
# embedded default (runc + the built python image), privilege-separated:
#   - cellgate-launchd, as root, the only part that can start sandboxes, serves
#     a closed set of requests on /run/cellgate/launcher.sock to one user;
#   - the gateway, which parses everything from the network, runs as the
#     unprivileged user `cellgate` with no capabilities and no_new_privs.
# A token is printed unless CELLGATE_TOKEN is set. Extra arguments go to the
# gateway (build/bin/cellgate --help). CELLGATE_SINGLE_PROCESS=1 runs the
# gateway as root with the launcher inside it instead.
set -euo pipefail
cd "$(dirname "$0")"
# Each step says which it was when it fails.
failed() { echo "run.sh: the step '$1' failed${2:+: $2}" >&2; exit 1; }
scripts/install-deps.sh || failed "install the dependencies (scripts/install-deps.sh)"
scripts/build.sh || failed "build (scripts/build.sh)"
image=$(images/build.sh python | tail -n 1) || failed "build the kernel image (images/build.sh python)"
echo "kernel image: $image"
echo "try:  curl -H 'Authorization: token <token>' -X POST http://127.0.0.1:8888/api/kernels"
if [[ ${CELLGATE_SINGLE_PROCESS:-0} == 1 ]]; then
  exec build/bin/cellgate --ip 127.0.0.1 --port 8888 "$@"
fi

user=cellgate
id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
# The gateway runs from a root-owned copy it can execute wherever this clone lives.
install -d -m 0755 /usr/local/lib/cellgate
install -m 0755 build/bin/cellgate /usr/local/lib/cellgate/cellgate
install -d -m 0700 -o "$user" -g "$user" /var/lib/cellgate/gateway
socket=/run/cellgate/launcher.sock
# Its own session, so Ctrl-C reaches the gateway first (which then removes its
# sandboxes through the service) and the service stops after it.
rm -f "$socket"
setsid build/bin/cellgate-launchd --socket "$socket" --client-user "$user" &
launchd=$!
trap 'kill "$launchd" 2>/dev/null; wait "$launchd" 2>/dev/null' EXIT
# However long the service needs (it reaps what a previous run left first),
# as long as it lives; it says what went wrong when it ends.
waited=0
until [[ -S $socket ]]; do
  if ! kill -0 "$launchd" 2>/dev/null; then
    status=0; wait "$launchd" || status=$?
    failed "start the launcher service (cellgate-launchd)" "it exited with status $status before serving $socket (its own message is above)"
  fi
  sleep 0.1
  if (( ++waited % 100 == 0 )); then echo "run.sh: waiting for cellgate-launchd to serve $socket ($((waited / 10)) s)" >&2; fi
done
setpriv --reuid="$user" --regid="$user" --init-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- \
  /usr/local/lib/cellgate/cellgate --ip 127.0.0.1 --port 8888 --launcher-socket "$socket" \
  --state-dir /var/lib/cellgate/gateway "$@"
