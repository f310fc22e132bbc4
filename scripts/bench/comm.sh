#!/bin/sh
# make bench: lib/comm's collectives over MPI against the same collectives in a
# plain MPI program (tests/comm/bench_comm.c, modes titan, mpi, both), all-gather,
# reduce-scatter, all-reduce and all-to-all-v (an equal part for each rank) of
# float32 by message size (the whole buffer, as nccl-tests counts it), on 2 and
# 4 ranks of this machine.  Figures are bus bandwidth (GB/s, nccl-tests' busbw);
# ratio = titan / plain MPI (1.00: the layer costs nothing; above 1 where
# lib/comm's rounds of messages, lib/comm/mpi_rounds.h, beat Open MPI's own
# choice of algorithm, as its blocking reduce-scatter from 256 KiB).  The plain
# program runs twice: as Open MPI waits by default (spinning; Open MPI yields
# by itself when it sees the node oversubscribed, the 4 ranks here) and with
# mpi_yield_when_idle (yielding the core while it waits, as titan's wait loop
# does after 100 us); "ratio y" compares with the second.  "ratio 1p" is
# bench_comm both: the layer's calls and MPI's blocking collectives in one
# titan process, round for round in turn, under the same thread level and at
# the same moments (separate programs run seconds apart, and a shared
# machine's speed can drift by 2x from one minute to the next).  Ranks share
# the machine's cores: 4 ranks on 2 cores measure the oversubscribed case,
# and a shared machine is noisy (a spinning rank starves its peer when other
# jobs hold the cores): the four runs take turns, COMM_BENCH_REPEAT times
# (default 3), and each figure is the best of them.  The load is printed with
# the table.
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
# the plain program over the transport titan's ranks take on one node
# (titan-train(1), OMPI_MCA_pml), so that the ratio is the layer's alone
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"

echo "load: $(uptime | sed 's/.*load average: //')   cores: $(nproc)"
printf "%-15s %5s %10s %11s %11s %11s %7s %7s %8s\n" op ranks bytes "titan GB/s" "MPI GB/s" \
	"MPI y GB/s" ratio "ratio y" "ratio 1p"
# best FILE: per operation and size, the highest bus bandwidth of the runs
best() { awk '{ k = $1 " " $2; if (!(k in bw) || $5 > bw[k]) bw[k] = $5 } END { for (k in bw) print k, 0, 0, bw[k] }' "$1"; }
for np in 2 4; do
	: >"$TMP/titan.all"
	: >"$TMP/mpi.all"
	: >"$TMP/mpiy.all"
	: >"$TMP/both.all"
	for _ in $(seq "${COMM_BENCH_REPEAT:-3}"); do
		$mpirun -np "$np" "$B" titan "$max" >>"$TMP/titan.all"
		$mpirun -np "$np" "$B" mpi "$max" >>"$TMP/mpi.all"
		$mpirun --mca mpi_yield_when_idle 1 -np "$np" "$B" mpi "$max" >>"$TMP/mpiy.all"
		$mpirun -np "$np" "$B" both "$max" >>"$TMP/both.all"
	done
	best "$TMP/titan.all" | sort -k2,2n >"$TMP/titan"
	best "$TMP/mpi.all" >"$TMP/mpi"
	best "$TMP/mpiy.all" >"$TMP/mpiy"
	grep '^titan ' "$TMP/both.all" | cut -d' ' -f2- >"$TMP/both_t.all"
	grep '^mpi ' "$TMP/both.all" | cut -d' ' -f2- >"$TMP/both_m.all"
	best "$TMP/both_t.all" >"$TMP/both_t"
	best "$TMP/both_m.all" >"$TMP/both_m"
	for op in all_gather reduce_scatter all_reduce all_to_allv; do
		grep "^$op " "$TMP/titan" | while read -r _ bytes _ _ bw; do
			ref=$(awk -v o="$op" -v b="$bytes" '$1 == o && $2 == b { print $5 }' "$TMP/mpi")
			refy=$(awk -v o="$op" -v b="$bytes" '$1 == o && $2 == b { print $5 }' "$TMP/mpiy")
			t1=$(awk -v o="$op" -v b="$bytes" '$1 == o && $2 == b { print $5 }' "$TMP/both_t")
			m1=$(awk -v o="$op" -v b="$bytes" '$1 == o && $2 == b { print $5 }' "$TMP/both_m")
			awk -v o="$op" -v n="$np" -v b="$bytes" -v t="$bw" -v r="$ref" -v y="$refy" \
				-v t1="$t1" -v m1="$m1" \
				'BEGIN { printf "%-15s %5d %10d %11.3f %11.3f %11.3f %7.2f %7.2f %8.2f\n", o, n, b, t, r, y,
					(r > 0 ? t / r : 0), (y > 0 ? t / y : 0), (m1 > 0 ? t1 / m1 : 0) }'
		done
	done
done
