#!/bin/sh
# make bench: lib/comm's collectives over MPI against the same collectives in a
# plain MPI program (tests/comm/bench_comm.c, modes titan and mpi), all-gather,
# reduce-scatter and all-reduce of float32 by message size (the whole buffer,
# as nccl-tests counts it), on 2 and 4 ranks of this machine.  Figures are bus
# bandwidth (GB/s, nccl-tests' busbw); ratio = titan / plain MPI (1.00: the
# layer costs nothing).  Ranks share the machine's cores: 4 ranks on 2 cores
# measure the oversubscribed case, and a shared machine is noisy; the load is
# printed with the table.
#
# COMM_BENCH_MAX (bytes, default 64 MiB) caps the message size.
set -eu
: "${BUILD:=build}"
make -s "$BUILD/tests/comm/bench_comm" >&2
B="$BUILD/tests/comm/bench_comm"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/titan-bench-comm.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
max=${COMM_BENCH_MAX:-67108864}
mpirun="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -ne 0 ] || mpirun="$mpirun --allow-run-as-root"

echo "load: $(uptime | sed 's/.*load average: //')   cores: $(nproc)"
printf "%-15s %5s %10s %12s %12s %7s\n" op ranks bytes "titan GB/s" "MPI GB/s" ratio
for np in 2 4; do
	$mpirun -np "$np" "$B" titan "$max" >"$TMP/titan"
	$mpirun -np "$np" "$B" mpi "$max" >"$TMP/mpi"
	for op in all_gather reduce_scatter all_reduce; do
		grep "^$op " "$TMP/titan" | while read -r _ bytes _ _ bw; do
			ref=$(awk -v o="$op" -v b="$bytes" '$1 == o && $2 == b { print $5 }' "$TMP/mpi")
			awk -v o="$op" -v n="$np" -v b="$bytes" -v t="$bw" -v r="$ref" \
				'BEGIN { printf "%-15s %5d %10d %12.3f %12.3f %7.2f\n", o, n, b, t, r, (r > 0 ? t / r : 0) }'
		done
	done
done
