#!/bin/sh
# The NCCL path compiles and links wherever CUDA is built (CI included, where
# no GPU runs it): lib/comm/nccl.o calls NCCL, and the programs that use it
# load libnccl.  Without CUDA the NCCL test reports why it skips.
. tests/lib.sh

obj=$BUILD/lib/comm/nccl.o
prog=$BUILD/tests/comm/test_comm_nccl
if [ "${CUDA:-0}" = 1 ]; then
	nm -u "$obj" >"$TMP/undef" 2>&1
	for f in ncclCommInitRankConfig ncclCommSplit ncclAllGather ncclReduceScatter ncclAllReduce \
		ncclBroadcast ncclSend ncclRecv ncclCommAbort; do
		t_grep "nccl.o calls $f" "^ *U $f\$" "$TMP/undef"
	done
	readelf -d "$prog" >"$TMP/dyn" 2>&1
	t_grep "test_comm_nccl links libnccl" 'NEEDED.*libnccl\.so' "$TMP/dyn"
else
	t_skip "NCCL objects" "no nvcc (CUDA=0)"
fi
"$prog" >"$TMP/run.log" 2>&1
t_grep "without a GPU the NCCL tests skip, saying why" 'SKIP NCCL test: \|\[  PASSED  \] 4 test' "$TMP/run.log"
t_done
