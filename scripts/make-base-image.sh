#!/usr/bin/env bash
# Make a base image locally (no registry answers here): debootstrap a minbase rootfs and `docker import` it
# under the name a plan uses. The rootfs tarball is cached between runs.
#   ./scripts/make-base-image.sh                                   Debian 12 (docker.io/library/debian:bookworm-slim)
#   ./scripts/make-base-image.sh docker.io/library/ubuntu:24.04   Ubuntu 24.04 (the CUDA 13.0 stacks' OS), from
#                                                                  Ubuntu's archive, checked with Ubuntu's keyring
set -euo pipefail
REF=${1:-docker.io/library/debian:bookworm-slim}
case "$REF" in
    docker.io/library/debian:bookworm-slim) SUITE=bookworm; SCRIPT=; COMPONENTS=main ;;
    docker.io/library/ubuntu:24.04) SUITE=noble; SCRIPT=/usr/share/debootstrap/scripts/gutsy; COMPONENTS=main,universe ;;  # Debian 12's debootstrap has no noble script; gutsy's is Ubuntu's
    *) echo "base: no recipe for $REF (debian:bookworm-slim or ubuntu:24.04)" >&2; exit 2 ;;
esac
# the archive debootstrap itself names for the suite (its script's default_mirror): Debian's for bookworm, Ubuntu's for noble
MIRROR=
if [ -n "$SCRIPT" ]; then
    MIRROR=$(ARCH=amd64 SUITE=$SUITE bash -c 'default_mirror() { echo "$1"; }; eval "$(sed -n "1,/^esac/p" "$0")"' "$SCRIPT")
fi
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/envkit/$SUITE-minbase.tar
if docker image inspect "$REF" > /dev/null 2>&1; then echo "base: $REF already on the engine"; exit 0; fi
if [ ! -s "$CACHE" ]; then
    mkdir -p "$(dirname "$CACHE")"
    ROOT=$(mktemp -d)
    KEYRING=()
    if [ "$SUITE" = noble ]; then
        # Ubuntu's archive keyring is not in Debian 12: take Ubuntu's package over TLS, checked against its pinned hash
        DEB=$(mktemp -d)
        curl -fsS -o "$DEB/k.deb" "${MIRROR/#http:/https:}/pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb"
        echo "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8  $DEB/k.deb" | sha256sum -c --quiet
        dpkg-deb -x "$DEB/k.deb" "$DEB/x"
        KEYRING=(--keyring "$DEB/x/usr/share/keyrings/ubuntu-archive-keyring.gpg")
    fi
    echo "base: debootstrap --variant=minbase $SUITE (about 40 s)"
    debootstrap --variant=minbase --components="$COMPONENTS" "${KEYRING[@]}" "$SUITE" "$ROOT" "$MIRROR" $SCRIPT > /tmp/debootstrap.log 2>&1 \
        || { tail -20 /tmp/debootstrap.log >&2; exit 1; }
    if [ "$SUITE" = noble ]; then  # the official image's sources (http: minbase has no CA certificates; apt checks the signatures)
        for suite in noble noble-updates noble-security; do echo "deb $MIRROR $suite main universe"; done > "$ROOT/etc/apt/sources.list"
        rm -rf "${DEB:?}"
    fi
    rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
    tar -C "$ROOT" -cf "$CACHE.part" . && mv "$CACHE.part" "$CACHE"
    rm -rf "$ROOT"
fi
docker import --change 'CMD ["/bin/bash"]' "$CACHE" "$REF" > /dev/null
echo "base: imported $REF ($(docker image inspect -f '{{.Size}}' "$REF") bytes)"
