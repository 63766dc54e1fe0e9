#!/usr/bin/env bash
# Install (if needed) and start a real Docker Engine on this Debian machine, then wait for its socket.
# The sandbox lacks CAP_SYS_RESOURCE, so containers get ulimits no higher than the current ones
# (its default-ulimits in /etc/docker/daemon.json). Idempotent: an engine that already answers is left alone.
set -euo pipefail
if docker info > /dev/null 2>&1; then
    echo "docker: engine already answering"; exit 0
fi
if ! command -v dockerd > /dev/null || ! command -v debootstrap > /dev/null; then
    echo "docker: installing docker.io and debootstrap (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io debootstrap > /dev/null
fi
mkdir -p /etc/docker
if [ ! -f /etc/docker/daemon.json ]; then
    cat > /etc/docker/daemon.json <<'JSON'
{"storage-driver": "overlay2",
 "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 20000, "Soft": 20000},
                     "nproc":  {"Name": "nproc",  "Hard": 4096,  "Soft": 4096}}}
JSON
fi
if ! pgrep -x dockerd > /dev/null; then
    setsid dockerd > /tmp/dockerd.log 2>&1 < /dev/null &
fi
for _ in $(seq 1 60); do
    if docker info > /dev/null 2>&1; then echo "docker: engine up ($(docker version --format '{{.Server.Version}}'))"; exit 0; fi
    sleep 1
done
echo "docker: the engine did not answer within 60 s; see /tmp/dockerd.log" >&2
tail -20 /tmp/dockerd.log >&2 || true
exit 1
