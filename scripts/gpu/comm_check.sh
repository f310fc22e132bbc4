#!/bin/sh
# The comm part of the GPU check (scripts/gpu/check.sh calls it on a machine
# with a GPU, after building the tree with CUDA and preparing the libraries
# titan links: MPI, cmocka, ...).  Two things, within a couple of minutes:
#
# 1. tests/comm/test_comm_nccl: every NCCL collective against its MPI twin on
#    the same data at a world size of one (all-gather, reduce-scatter,
#    all-reduce sum and max, broadcast, all-to-all(v), send+recv, in float32,
#    float64, bfloat16, int32, int64, uint8, from 1 element to 1 Mi), the
#    ordering after the compute stream, a split of the NCCL communicator;
# 2. NCCL bandwidth on device buffers by message size, 4 KiB to 1 GiB
#    (tests/comm/bench_comm nccl, one rank per GPU of the machine): all-gather,
#    reduce-scatter, all-reduce; with one GPU only the algorithm bandwidth
#    (size / time: the cost of a call) means anything.
#
# The train step through NCCL (FSDP's collectives on NCCL in a world of one,
# against the plain CUDA run and the CPU) is tests/gpu/train.sh, check.sh's
# train-equivalence stage.
#
# Without a GPU (scripts/gpu/selftest.sh, tests/gpu/comm_stage.sh) the NCCL
# test must say it skips, and the launch is checked instead of the bandwidth:
# 2 ranks of bench_comm titan (lib/comm over MPI) started by MPIRUN.
#
# BUILD (default build) is the folder holding tests/comm/ (check.sh passes
# the carried one, .gpu-deps/build: its own GPU_CHECK build has no comm);
# MPIRUN (default mpirun) the launcher (check.sh passes the carried Open
# MPI's); OUT, when set, receives the logs (comm_nccl_test.log,
# comm_nccl_bw.txt).  Exit status 0 when the test passed.
set -u
: "${BUILD:=build}" "${MPIRUN:=mpirun}"
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/titan-gpu-comm.XXXXXX")}
mkdir -p "$out"
status=0
for p in test_comm_nccl bench_comm; do
	[ -x "$BUILD/tests/comm/$p" ] || { echo "comm_check.sh: no $BUILD/tests/comm/$p (BUILD?)"; exit 1; }
done
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

echo "== comm: NCCL against MPI at world size 1 (tests/comm/test_comm_nccl)"
if "$BUILD/tests/comm/test_comm_nccl" >"$out/comm_nccl_test.log" 2>&1; then
	grep -e '^\[  PASSED' -e SKIP "$out/comm_nccl_test.log"
	# a GPU machine must not skip; one without must say it skips
	if [ "$ngpu" -ge 1 ]; then
		grep -q SKIP "$out/comm_nccl_test.log" && status=1
	else
		grep -q 'SKIP NCCL test' "$out/comm_nccl_test.log" || status=1
	fi
else
	status=1
	grep -e FAILED -e ERROR -e 'NCCL' "$out/comm_nccl_test.log" | head -20
fi

mpirun="$MPIRUN --oversubscribe --bind-to none"
[ "$(id -u)" -ne 0 ] || mpirun="$mpirun --allow-run-as-root"
if [ "$ngpu" -lt 1 ]; then
	echo "== comm: no GPU: 2 ranks of tests/comm/bench_comm titan through $MPIRUN"
	# shellcheck disable=SC2086
	if timeout 60 $mpirun -np 2 "$BUILD/tests/comm/bench_comm" titan 4096 >"$out/comm_nccl_bw.txt" 2>&1 &&
		grep -q '^all_reduce 4096 ' "$out/comm_nccl_bw.txt"; then
		echo "launched: $(wc -l <"$out/comm_nccl_bw.txt") lines from rank 0"
	else
		status=1
		tail -20 "$out/comm_nccl_bw.txt"
	fi
	exit $status
fi
echo "== comm: NCCL bandwidth, $ngpu rank(s), one per GPU (tests/comm/bench_comm nccl)"
# shellcheck disable=SC2086
if $mpirun -np "$ngpu" "$BUILD/tests/comm/bench_comm" nccl 1073741824 >"$out/comm_nccl_bw.txt" 2>&1; then
	printf "%-15s %12s %12s %12s %12s\n" op bytes "us/call" "algbw GB/s" "busbw GB/s"
	awk '{ printf "%-15s %12d %12.1f %12.2f %12.2f\n", $1, $2, $3 * 1e6, $4, $5 }' "$out/comm_nccl_bw.txt"
else
	status=1
	tail -20 "$out/comm_nccl_bw.txt"
fi
exit $status
