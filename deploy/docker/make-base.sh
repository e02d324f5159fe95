#!/bin/sh
# A stand-in for the official python:3.11-slim-bookworm image, made from Debian packages: for a machine whose
# podman can reach Debian's mirror but no container registry (tests/deploy/test_container.py uses it).
#
#   deploy/docker/make-base.sh [IMAGE]        (default localhost/plumbline-base:bookworm; run as root)
#   podman build --build-arg BASE=localhost/plumbline-base:bookworm ...
#
# Debian bookworm's Python is 3.11, as in the official image; `python` is python-is-python3 and the venv module is
# python3-venv. Nothing is done when IMAGE exists already (remove it to make it again); about a minute and a half
# and 140 MB otherwise. MIRROR overrides the Debian mirror (default: the one debootstrap uses).
set -eu

image="${1:-localhost/plumbline-base:bookworm}"
if podman image exists "$image"; then
    echo "make-base: $image exists"
    exit 0
fi
root="$(mktemp -d "${TMPDIR:-/tmp}/plumbline-base.XXXXXX")"
trap 'rm -rf "$root"' EXIT

debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$root" ${MIRROR:+"$MIRROR"} >"$root.log" 2>&1 || {
    tail -n 30 "$root.log" >&2
    rm -f "$root.log"
    exit 1
}
rm -f "$root.log"
# what an image never needs: apt's downloads and lists, documentation, and locales other than C.UTF-8
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
find "$root"/usr/lib/python3* -name __pycache__ -type d -prune -exec rm -rf {} +

tar -C "$root" --numeric-owner -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --message "debootstrap --variant=minbase bookworm, with python3 and python3-venv" \
    - "$image" >/dev/null
echo "make-base: $image made"
