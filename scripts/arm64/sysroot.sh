#!/bin/sh
# Make the arm64 sysroot titan's cross build links and qemu-user runs against:
# Debian's arm64 packages of the libraries titan uses, unpacked (dpkg -x) into
# DIR, with apt's own state kept in DIR too, so the machine's package database
# is neither read nor changed (Open MPI's arm64 -dev package cannot be
# installed beside the amd64 one: they share mpicc).  The runtime libraries
# come with their whole closure, resolved by apt as for an empty arm64 system;
# the -dev packages (headers, .so links) come alone, without the compilers
# they depend on.  Idempotent: a finished DIR (DIR/.done, which names the
# packages asked for) is kept while the lists below are the same.
#
#   sh scripts/arm64/sysroot.sh DIR
set -eu
dir=${1:?usage: sysroot.sh DIR}
RUNTIME="libc6 libstdc++6 libgomp1 libopenmpi3 libopenblas0-pthread libdnnl2 libcurl4
libarchive13 libzstd1 libdeflate0 libjansson4 libpcre2-8-0 libcmocka0 libssl3 libjpeg62-turbo libpng16-16 libwebp7 libsnappy1v5"
DEV="libc6-dev linux-libc-dev libopenmpi-dev libopenblas-dev libopenblas-pthread-dev libdnnl-dev libcurl4-openssl-dev
libarchive-dev libzstd-dev libdeflate-dev libjansson-dev libpcre2-dev libcmocka-dev libssl-dev
libjpeg62-turbo-dev libpng-dev libwebp-dev libsnappy-dev"

wanted=$(echo $RUNTIME $DEV)
[ -f "$dir/.done" ] && [ "$(sed -n 2p "$dir/.done")" = "$wanted" ] && exit 0
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
apt="$dir/.apt"
rm -rf "$apt" "$dir/root"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/dev" "$dir/root"
: >"$apt/status"
cat >"$apt/apt.conf" <<CONF
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
APT::Install-Recommends "false";
Dir::State "$apt";
Dir::State::Lists "$apt/lists";
Dir::State::status "$apt/status";
Dir::Cache "$apt/cache";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Debug::NoLocking "true";
CONF
export APT_CONFIG="$apt/apt.conf"

echo "arm64 sysroot: resolving and fetching Debian's arm64 packages into $dir" >&2
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --download-only $RUNTIME >/dev/null
# shellcheck disable=SC2086
(cd "$apt/dev" && apt-get download -qq $DEV)
n=0
for deb in "$apt"/cache/archives/*.deb "$apt"/dev/*.deb; do
	dpkg -x "$deb" "$dir/root"
	n=$((n + 1))
done
# Debian names OpenBLAS's library and headers through alternatives, which
# dpkg -x does not make: the links its postinst would.
lib="$dir/root/usr/lib/aarch64-linux-gnu" inc="$dir/root/usr/include/aarch64-linux-gnu"
for f in libopenblas.so.0 libopenblas.so; do
	ln -sf "openblas-pthread/$f" "$lib/$f"
done
for f in cblas.h openblas_config.h; do
	ln -sf "openblas-pthread/$f" "$inc/$f"
done
printf '%s\n%s\n' "$n" "$wanted" >"$dir/.done"
echo "arm64 sysroot: $n packages in $dir/root" >&2
