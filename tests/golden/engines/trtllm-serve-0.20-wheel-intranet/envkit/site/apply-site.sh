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
    # The image's own sources, the files its distribution ships (sources.list; debian.sources or ubuntu.sources in the
    # deb822 format), whatever archive they name: each entry goes to the site's mirror, a -security suite to the security
    # mirror (Debian's, whose archive path ends in -security, to APT_DEBIAN_SECURITY). Other lists are left as they are,
    # and must reach only the site (below).
    for f in $R/etc/apt/sources.list $R/etc/apt/sources.list.d/debian.sources $R/etc/apt/sources.list.d/ubuntu.sources; do
        [ -f "$f" ] || continue
        case "$f" in *.sources) deb822=1 ;; *) deb822=0 ;; esac
        awk -v deb822="$deb822" -v main="$APT_MIRROR" -v sec="$APT_SECURITY" -v dsec="$APT_DEBIAN_SECURITY" '
            # a security suite (noble-security; Debian 10 and older: buster/updates) goes to the security mirror, but on
            # the Ubuntu ports archive (arm64), which holds its own security suites; a local file: or cdrom: source stays
            function target(suites, uri,   n, i, s, all) {
                if (uri ~ /^(file|cdrom|copy):/) return uri
                n = split(suites, s, " "); all = n > 0
                for (i = 1; i <= n; i++) if (s[i] !~ /(-security|\/updates)$/) all = 0
                if (!all || uri ~ /ubuntu-ports\/?$/) return main "/"
                return (uri ~ /-security\/?$/ ? dsec : sec) "/"
            }
            function flush(   i, suites, uri) {
                for (i = 1; i <= n; i++) {
                    if (tolower(line[i]) ~ /^suites:/) { suites = line[i]; sub(/^[^:]*:[ \t]*/, "", suites) }
                    if (tolower(line[i]) ~ /^uris:/) { uri = line[i]; sub(/^[^:]*:[ \t]*/, "", uri) }
                }
                for (i = 1; i <= n; i++) print (tolower(line[i]) ~ /^uris:/ ? "URIs: " target(suites, uri) : line[i])
                n = 0
            }
            deb822 == 1 { if ($0 ~ /^[ \t]*$/) { flush(); print } else line[++n] = $0; next }
            /^[ \t]*deb(-src)?[ \t]/ {
                i = 2
                if ($2 ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
                if (i < NF) $i = target($(i + 1), $i)
            }
            { print }
            END { if (deb822 == 1) flush() }
        ' "$f" > "$f.envkit"
        mv "$f.envkit" "$f"
        echo "envkit: apt source $f -> ${APT_MIRROR}"
    done
    left=$(cat $R/etc/apt/sources.list $R/etc/apt/sources.list.d/*.list $R/etc/apt/sources.list.d/*.sources 2>/dev/null \
           | grep -iE '^[[:space:]]*(deb|deb-src|URIs:)' | grep -oE '(https?|ftp)://[^ ]+' \
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
