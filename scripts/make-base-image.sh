#!/usr/bin/env bash
# Make a base image locally (no registry answers here): debootstrap a minbase rootfs with the official image's apt
# suites (point release, -updates, -security), upgrade it, and `docker import` it under the name a plan uses,
# labelled io.envkit.local-base so that nobody takes it for the registry's image. The rootfs tarball is cached.
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
    else  # the official image's suites: the point release, -updates and -security
        HOST_SOURCES=/etc/apt/sources.list.d/debian.sources
        if [ -s "$HOST_SOURCES" ] && grep -q "^Suites:.*\b$SUITE-security\b" "$HOST_SOURCES"; then
            cp "$HOST_SOURCES" "$ROOT/etc/apt/sources.list.d/debian.sources"  # this Debian host's own (the official image's layout)
            rm -f "$ROOT/etc/apt/sources.list"
        else
            sed -i "s/^\(deb .* \)$SUITE main$/\1$SUITE main\n\1$SUITE-updates main/" "$ROOT/etc/apt/sources.list"
            echo "base: no $SUITE-security source on this host to copy: the image gets the point release and -updates only" >&2
        fi
    fi
    # the suites' updates, security fixes included, as the official image has them when it is published
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
    chroot "$ROOT" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq upgrade && apt-get clean' \
        > /tmp/debootstrap-upgrade.log 2>&1 || { tail -20 /tmp/debootstrap-upgrade.log >&2; exit 1; }
    : > "$ROOT/etc/resolv.conf"
    rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
    tar -C "$ROOT" -cf "$CACHE.part" . && mv "$CACHE.part" "$CACHE"
    rm -rf "$ROOT"
fi
# It takes the official name because every plan's FROM names it and no registry answers here; the label says what it is.
docker import --change 'CMD ["/bin/bash"]' \
    --change "LABEL io.envkit.local-base=\"debootstrap --variant=minbase $SUITE, upgraded (scripts/make-base-image.sh): not the registry's image\"" \
    "$CACHE" "$REF" > /dev/null
echo "base: imported $REF ($(docker image inspect -f '{{.Size}}' "$REF") bytes): a local debootstrap image under the official" \
     "name (label io.envkit.local-base); where a registry answers, docker rmi it and pull the real one"
