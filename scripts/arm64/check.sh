#!/bin/sh
# make check-arm64: the aarch64 build's tests under qemu-user on this x86-64
# machine.  The programs run through wrappers (build/arm64/qbin/titan-*) that
# start them under qemu-aarch64 with the arm64 sysroot as their root, so the
# end-to-end scripts call them as they call the host's; the cmocka programs
# run under TITAN_TEST_EXEC.  The processor qemu emulates is QEMU_CPU (default
# "max" with 128-bit SVE vectors, as Neoverse V2 has: Grace); tests/isa.list's
# programs run again at TITAN_CPU_ISA=baseline (the NEON kernels, the table
# CRC32C).  Which cmocka programs run is tests/arm64/programs.list (a line
# each); what is left out, and why, is said there.
#
# Speed under qemu says nothing of an ARM processor's: these are correctness
# runs only.  So the tests run short (TITAN_TEST_SHORT=1: fewer repetitions of
# the same code, tests/support/testutil.h), and MFU's peak is given instead of
# measured (TITAN_CPU_PEAK_FLOPS, _BF16): the probe's 1024^3 products took
# half a minute of every titan-train start and of test_metrics under qemu, to
# measure qemu.  make check runs the probe, and the full amounts.
set -eu
ROOT=$(pwd)
B=build/arm64
SYSROOT=$ROOT/$B/sysroot/root
QBIN=$ROOT/$B/qbin
command -v qemu-aarch64 >/dev/null || { echo "check-arm64: no qemu-aarch64 (make deps-arm64)" >&2; exit 1; }
rm -rf "$QBIN"
mkdir -p "$QBIN"
for p in "$B"/bin/titan-*; do
	printf '#!/bin/sh\nexec qemu-aarch64 -L "%s" "%s" "$@"\n' "$SYSROOT" "$ROOT/$p" >"$QBIN/${p##*/}"
	chmod +x "$QBIN/${p##*/}"
done
export QEMU_CPU="${QEMU_CPU:-max,sve-default-vector-length=16}"
export TITAN_TEST_SHORT=1 TITAN_CPU_PEAK_FLOPS=1e10 TITAN_CPU_PEAK_FLOPS_BF16=1e10
programs=""
while read -r t; do
	case "$t" in '#'* | '') continue ;; esac
	programs="$programs $B/$t"
done <tests/arm64/programs.list
# shellcheck disable=SC2086
TITAN_TEST_EXEC="qemu-aarch64 -L $SYSROOT" TITAN_TEST_SCRIPTS="tests/arm64/*.sh" \
	X86_BIN="$ROOT/bin" BUILD=$B BIN=$B/qbin exec sh tests/run.sh $programs
