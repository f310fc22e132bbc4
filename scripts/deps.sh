#!/bin/sh
# Install the Debian packages titan's build and tests need, only those missing,
# and say which.  `deps.sh` is what make, make check and make demo need;
# `deps.sh fuzz` adds the clang toolchain that only `make fuzz` needs;
# `deps.sh arm64` adds the aarch64 cross compiler and qemu-user that only
# `make check-arm64` needs (its arm64 libraries are scripts/arm64/sysroot.sh's);
# `deps.sh -n [fuzz|arm64]` only lists what is missing.  The text packages after
# jargon are what scripts/fixtures_corpus.py builds the test corpora from.
set -eu

PKGS="gcc g++ make pkg-config binutils lld libarchive-dev libzstd-dev libdeflate-dev libcurl4-openssl-dev libssl-dev
libjpeg62-turbo-dev libpng-dev libwebp-dev libsnappy-dev
libjansson-dev libpcre2-dev libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin libcmocka-dev
mandoc jq gzip zstd xz-utils bzip2 lz4 zip tar curl python3 fortunes jargon
fortunes-min fortunes-zh jargon-text gnu-standards fortunes-ru fortunes-de fortunes-es
fortunes-it fortunes-pl fortunes-bg"
# libFuzzer and its sanitizer runtimes; libomp for the library's OpenMP under clang.
FUZZ_PKGS="clang libclang-rt-dev libomp-dev"
ARM64_PKGS="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"

want=$PKGS
dry=0
for group in "$@"; do
	case "$group" in
	-n) dry=1 ;;
	fuzz) want="$want $FUZZ_PKGS" ;;
	arm64) want="$want $ARM64_PKGS" ;;
	*) echo "deps.sh: unknown group '$group' (known: -n, fuzz, arm64)" >&2; exit 2 ;;
	esac
done

# One dpkg-query for all: names it does not know are simply not listed.
installed=$(dpkg-query -W -f='${Package} ${Status}\n' $want 2>/dev/null |
	awk '/ ok installed$/ { sub(/:.*/, "", $1); print $1 }')
missing=""
for p in $want; do
	echo "$installed" | grep -qx "$p" || missing="$missing $p"
done
# python3 may come from elsewhere (pyenv); only the interpreter matters.
if command -v python3 >/dev/null 2>&1; then
	missing=$(echo "$missing" | tr ' ' '\n' | grep -vx python3 | tr '\n' ' ' || true)
fi
missing=$(echo $missing)
[ -z "$missing" ] && exit 0
if [ "$dry" = 1 ]; then
	echo "$missing"
	exit 0
fi

echo "titan deps: installing: $missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >&2
echo "titan deps: installed: $missing" >&2
