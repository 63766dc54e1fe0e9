#!/bin/sh
# envkit: point an image at the site's own mirrors, or (offline) at the carried apt repository only.
# Settings come from site.env beside this script; nothing here reaches a network.
set -eu
here=$(dirname "$0")
. "$here/site.env"
R=${ENVKIT_ROOT:-}   # tests run this script against a directory tree instead of /

if [ "${REMOVE_VENDOR_LISTS:-1}" = 1 ] && [ -d $R/etc/apt/sources.list.d ]; then
    for f in $R/etc/apt/sources.list.d/*; do
        [ -e "$f" ] || continue
        case "$(basename "$f")" in
            cuda*|nvidia*|rocm*|amdgpu*|graphics*|deadsnakes*)
                rm -f "$f"; echo "envkit: removed vendor apt list $f" ;;
        esac
    done
fi

if [ "${OFFLINE:-0}" = 1 ]; then
    rm -f $R/etc/apt/sources.list $R/etc/apt/sources.list.d/*.list $R/etc/apt/sources.list.d/*.sources
    echo "deb [trusted=yes] file:/opt/envkit/debs ./" > $R/etc/apt/sources.list.d/envkit-offline.list
    echo "envkit: apt reads only the carried repository /opt/envkit/debs"
elif [ -n "${APT_MIRROR:-}" ]; then
    # Both formats: sources.list lines (deb URL suite ...) and deb822 files (URIs: URL).
    for f in $R/etc/apt/sources.list $R/etc/apt/sources.list.d/*.list $R/etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        sed -i -E \
            -e "s#https?://security\.ubuntu\.com/ubuntu/?#${APT_SECURITY}/#g" \
            -e "s#https?://([a-z]{2}\.)?archive\.ubuntu\.com/ubuntu/?#${APT_MIRROR}/#g" \
            -e "s#https?://ports\.ubuntu\.com/ubuntu-ports/?#${APT_MIRROR}/#g" \
            -e "s#https?://(deb|security)\.debian\.org/debian-security/?#${APT_DEBIAN_SECURITY}/#g" \
            -e "s#https?://deb\.debian\.org/debian/?#${APT_MIRROR}/#g" \
            "$f"
        echo "envkit: apt source $f -> ${APT_MIRROR}"
    done
    left=$(cat $R/etc/apt/sources.list $R/etc/apt/sources.list.d/*.list $R/etc/apt/sources.list.d/*.sources 2>/dev/null \
           | grep -E '^[[:space:]]*(deb|deb-src|URIs:)' | grep -oE '(https?|ftp)://[^ ]+' \
           | grep -vE "^(${SITE_HOSTS_RE})" || true)
    if [ -n "$left" ]; then
        echo "envkit: error: apt sources still reach outside the site: $left" >&2
        echo "envkit: fix: mirror them and add them to the site file, or remove the list in the base image" >&2
        exit 1
    fi
fi

if [ -f "$here/ca.crt" ]; then
    mkdir -p $R/usr/local/share/ca-certificates $R/etc/ssl/certs
    cp "$here/ca.crt" $R/usr/local/share/ca-certificates/envkit-site-ca.crt
    if [ -z "$R" ] && command -v update-ca-certificates > /dev/null 2>&1; then
        update-ca-certificates > /dev/null
    else
        cat "$here/ca.crt" >> $R/etc/ssl/certs/ca-certificates.crt
    fi
    echo "envkit: trusting the site CA certificate"
fi

if [ -f "$here/pip.conf" ]; then
    cp "$here/pip.conf" $R/etc/pip.conf
    echo "envkit: pip configured by $R/etc/pip.conf"
fi
