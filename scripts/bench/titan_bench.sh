#!/bin/sh
# titan-bench on this machine: the CPU backend's GEMMs on Llama 3 8B's linear
# shapes against the measured float32 and bf16 ceilings (chains of the level in
# force: TITAN_CPU_ISA=avx2 measures what an AVX2-only CPU runs; every report
# opens with that dispatch), attention with 8B's heads, the
# loader and checkpoint I/O against the raw disk, a training step (alone and
# FSDP 2) against the ceiling, the comm layer's collectives against MPI's own,
# and the tokenizer against HF
# tokenizers and tiktoken (PYTHON with them; the rows say so without).  The
# GPU benches report why they cannot run where there is no GPU.
#
# Environment: PYTHON, TITAN_FIXTURES (default ../shared/fixtures), TITAN_CPU_ISA,
# BENCH_TOKENS (M of the GEMMs, default 256), BENCH_IO_SIZE (default 256M),
# BENCH_QUICK=1 (small sizes, for a smoke run).
set -eu
BIN=${BIN:-bin}
FIX=${TITAN_FIXTURES:-../shared/fixtures}
PY=${PYTHON:-python3}
B="$BIN/titan-bench"
if [ "${BENCH_QUICK:-0}" = 1 ]; then
	M=32 SIZE=16M SEQ=256 S=0.2
else
	M=${BENCH_TOKENS:-256} SIZE=${BENCH_IO_SIZE:-256M} SEQ=1024 S=1
fi
"$B" gemm --shapes llama3-8b --tokens "$M" --seconds "$S"
echo
"$B" attention --attention-shape llama3-8b --seq "$SEQ" --seconds "$S"
echo
"$B" io --size "$SIZE"
echo
# a training step of debugmodel alone and under FSDP 2, the collectives of 2 ranks
mpirun="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" -ne 0 ] || mpirun="$mpirun --allow-run-as-root"
"$B" step --model debugmodel --batch 4 --seq "$SEQ" --seconds "$S"
echo
OMP_NUM_THREADS=1 $mpirun -np 2 "$B" step --model debugmodel --batch 2 --seq "$SEQ" \
	--threads 1 --seconds "$S"
echo
OMP_NUM_THREADS=1 $mpirun -np 2 "$B" comm --size "$SIZE" --threads 1 --seconds "$S"
echo
for t in llama3_1 llama3_tiktoken; do
	"$B" tokenize --tokenizer "$FIX/tokenizers/$t" --input "$FIX/corpus/en.jsonl" \
		--python "$PY" --seconds "$S"
	echo
done
