#!/usr/bin/env bash
# Make a Debian 12 base image locally (no registry answers here): debootstrap a minbase rootfs and
# `docker import` it under the name the CPU plan uses. The rootfs tarball is cached between runs.
set -euo pipefail
REF=${1:-docker.io/library/debian:bookworm-slim}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/envkit/debian-bookworm-minbase.tar
if docker image inspect "$REF" > /dev/null 2>&1; then echo "base: $REF already on the engine"; exit 0; fi
if [ ! -s "$CACHE" ]; then
    mkdir -p "$(dirname "$CACHE")"
    ROOT=$(mktemp -d)
    echo "base: debootstrap --variant=minbase bookworm (about 40 s)"
    debootstrap --variant=minbase bookworm "$ROOT" http://deb.debian.org/debian > /tmp/debootstrap.log 2>&1 \
        || { tail -20 /tmp/debootstrap.log >&2; exit 1; }
    rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
    tar -C "$ROOT" -cf "$CACHE.part" . && mv "$CACHE.part" "$CACHE"
    rm -rf "$ROOT"
fi
docker import --change 'CMD ["/bin/bash"]' "$CACHE" "$REF" > /dev/null
echo "base: imported $REF ($(docker image inspect -f '{{.Size}}' "$REF") bytes)"
