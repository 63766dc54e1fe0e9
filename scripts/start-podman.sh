#!/usr/bin/env bash
# Install (if needed) and start Podman's Docker-compatible API on /tmp/podman.sock, so envkit can
# use it through DOCKER_HOST=unix:///tmp/podman.sock. runc, not crun (cgroups in hybrid mode), and
# the ulimits this sandbox allows (no CAP_SYS_RESOURCE).
set -euo pipefail
SOCK=${PODMAN_SOCK:-/tmp/podman.sock}
if ! command -v podman > /dev/null; then
    echo "podman: installing podman and runc (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc > /dev/null
fi
mkdir -p /etc/containers
if [ ! -f /etc/containers/containers.conf ] || ! grep -q envkit /etc/containers/containers.conf; then
    cat > /etc/containers/containers.conf <<'CONF'
# written by envkit's scripts/start-podman.sh
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
fi
if ! curl -s --unix-socket "$SOCK" http://d/_ping > /dev/null 2>&1; then
    setsid podman system service --time=0 "unix://$SOCK" > /tmp/podman-service.log 2>&1 < /dev/null &
fi
for _ in $(seq 1 30); do
    if curl -s --unix-socket "$SOCK" http://d/_ping > /dev/null 2>&1; then echo "podman: API on unix://$SOCK"; exit 0; fi
    sleep 1
done
echo "podman: the API did not answer on $SOCK; see /tmp/podman-service.log" >&2
exit 1
