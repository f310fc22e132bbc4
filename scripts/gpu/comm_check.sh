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
# BUILD (default build) is the build folder; OUT, when set, receives the logs
# (comm_nccl_test.log, comm_nccl_bw.txt).  Exit status 0 when the test passed.
set -u
: "${BUILD:=build}"
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/titan-gpu-comm.XXXXXX")}
mkdir -p "$out"
status=0

echo "== comm: NCCL against MPI at world size 1 (tests/comm/test_comm_nccl)"
if "$BUILD/tests/comm/test_comm_nccl" >"$out/comm_nccl_test.log" 2>&1; then
	grep -e '^\[  PASSED' -e SKIP "$out/comm_nccl_test.log"
	grep -q SKIP "$out/comm_nccl_test.log" && status=1 # a GPU machine must not skip
else
	status=1
	grep -e FAILED -e ERROR -e 'NCCL' "$out/comm_nccl_test.log" | head -20
fi

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] || ngpu=1
mpirun="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -ne 0 ] || mpirun="$mpirun --allow-run-as-root"
echo "== comm: NCCL bandwidth, $ngpu rank(s), one per GPU (tests/comm/bench_comm nccl)"
if $mpirun -np "$ngpu" "$BUILD/tests/comm/bench_comm" nccl 1073741824 >"$out/comm_nccl_bw.txt" 2>&1; then
	printf "%-15s %12s %12s %12s %12s\n" op bytes "us/call" "algbw GB/s" "busbw GB/s"
	awk '{ printf "%-15s %12d %12.1f %12.2f %12.2f\n", $1, $2, $3 * 1e6, $4, $5 }' "$out/comm_nccl_bw.txt"
else
	status=1
	tail -20 "$out/comm_nccl_bw.txt"
fi
exit $status
