#!/bin/sh
# Install the Debian packages titan's build and tests need, only those missing.
set -eu

PKGS="gcc make pkg-config libarchive-dev libzstd-dev libcurl4-openssl-dev libssl-dev
libjansson-dev libpcre2-dev libopenblas-dev libopenmpi-dev openmpi-bin libcmocka-dev
mandoc jq gzip zstd xz-utils bzip2 lz4 zip tar curl python3 fortunes jargon"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	exit 0
fi
# python3 may come from elsewhere (pyenv); only the interpreter matters.
if command -v python3 >/dev/null 2>&1; then
	missing=$(echo "$missing" | tr ' ' '\n' | grep -vx python3 | tr '\n' ' ')
fi
missing=$(echo $missing)
[ -z "$missing" ] && exit 0

echo "titan deps: installing:$missing" | sed 's/:/: /' >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >&2
