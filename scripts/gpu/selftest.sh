#!/bin/sh
# Check, on this machine (no GPU needed), that what scripts/gpu/prepare.sh put
# in .gpu-deps is all scripts/gpu/check.sh needs from Debian: in a private
# mount namespace, every system header and library the folder provides is
# replaced by a poison (a header that is an #error, a library that is not ELF),
# then check.sh --build-only builds the GPU check and runs its tests (which
# skip without a GPU, except those that need none), the carried
# titan-train's (tests/gpu/train.sh: without a GPU, its refusal) and the comm
# stage (the carried NCCL test, which skips, and 2 ranks launched by the
# carried mpirun).  A header, library or Open MPI program (mpirun, orterun,
# orted) taken from the system instead of the folder fails the build, the
# link or the launch.  Prints the stages and the time taken.
# Needs root (unshare -m, mount --bind); run prepare.sh first.
set -eu

deps=${GPU_DEPS:-$(pwd)/.gpu-deps}
[ -d "$deps/include" ] || { echo "selftest.sh: no $deps: run sh scripts/gpu/prepare.sh" >&2; exit 1; }
poison=$(mktemp -d)
trap 'rm -rf "$poison"' EXIT
printf 'not a library: scripts/gpu/selftest.sh hid it\n' >"$poison/lib"

# The mounts, as a script for the namespace's shell.
plan=$poison/plan
: >"$plan"
( cd "$deps/include" && find . -type f ) | while read -r h; do
	h=${h#./}
	for sys in "/usr/include/$h" "/usr/include/x86_64-linux-gnu/$h" \
		"/usr/include/x86_64-linux-gnu/openblas-pthread/$h"; do
		[ -f "$sys" ] || continue
		mkdir -p "$poison/h/$(dirname "$h")"
		printf '#error "%s: the system header, not .gpu-deps'"'"'s"\n' "$sys" >"$poison/h/$h"
		echo "mount --bind '$poison/h/$h' '$sys'" >>"$plan"
	done
done
# (and the carried titan-train's: Open MPI with its components, oneDNN,
# jansson, hwloc, libevent, PMIx; not zlib, zstd, libgomp or libudev, which
# this machine's own tools load)
multi=/usr/lib/x86_64-linux-gnu
for lib in $multi/libopenblas*.so* $multi/openblas-pthread/*.so* \
	$multi/libcmocka.so* $multi/libgfortran.so* $multi/libcblas.so* $multi/libblas.so* \
	$multi/libmpi.so* $multi/libopen-rte.so* $multi/libopen-pal.so* $multi/openmpi/lib/openmpi3/*.so \
	$multi/libdnnl.so* $multi/libjansson.so* $multi/libhwloc.so* $multi/libevent_*.so* \
	$multi/libpmix.so* $multi/pmix2/lib/pmix/*.so $multi/libOpenCL.so* $multi/libmunge.so*; do
	[ -e "$lib" ] && echo "mount --bind '$poison/lib' '$(readlink -f "$lib")'" >>"$plan"
done
# Open MPI's programs: the check must launch with openmpi-bin's carried copy
printf '#!/bin/sh\necho "$0: the system copy, hidden by scripts/gpu/selftest.sh" >&2\nexit 127\n' \
	>"$poison/prog"
chmod +x "$poison/prog"
for prog in mpirun mpiexec orterun orted; do
	p=$(command -v "$prog" 2>/dev/null) || continue
	echo "mount --bind '$poison/prog' '$(readlink -f "$p")'" >>"$plan"
done
sort -u "$plan" -o "$plan"
echo "selftest.sh: hiding $(wc -l <"$plan") system headers, libraries and programs"
t0=$(date +%s)
rc=0
unshare -m sh -c ". '$plan' && sh scripts/gpu/check.sh --build-only" || rc=$?
echo "selftest.sh: $([ "$rc" = 0 ] && echo passed || echo "failed ($rc)") in $(($(date +%s) - t0)) s"
exit "$rc"
