#!/bin/sh
# make bench: the CPU backend's GEMMs on Llama linears' shapes, bfloat16
# against float32 (OpenBLAS, the reference path), both through the matmul op as
# the model calls it: per linear the forward x W^T, the input gradient dy W and
# the weight gradient dy^T x accumulated into float32.  The bf16 GEMMs run
# oneDNN at core/cpu_isa's level avx512 and above and the portable path below
# (widened to float32, OpenBLAS sgemm): the last column names which, and the
# header the dispatch (titan-bench's "cpu:" line).  GFLOP/s of the fastest of
# several runs; "all" is the products' total time (what one step of that model
# spends in its linears, per layer).
#
# Environment: BENCH_THREADS (default: all cores), BENCH_QUICK=1 (debugmodel only),
# TITAN_CPU_ISA (a lower level: avx2 measures what an AVX2-only CPU runs).
# A shared machine makes the figures noisy: the load is printed with them.
set -eu
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
THREADS=${BENCH_THREADS:-$(nproc)}
export OMP_NUM_THREADS="$THREADS"
make -s "$BUILD/tests/backend/bench_gemm" "$BIN/titan-bench" >&2

out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ "${BENCH_QUICK:-0}" = 1 ]; then
	"$BUILD/tests/backend/bench_gemm" debugmodel >"$out"
else
	"$BUILD/tests/backend/bench_gemm" >"$out"
fi

echo "GEMM, bfloat16 vs float32 (OpenBLAS), $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu: $("$BIN/titan-bench" gemm --json --threads 1 --seconds 0 --shapes 1,1,1 --dtype fp32 | jq -r .cpu)"
awk '
function get(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } }
{ mdl = get("model"); fl = 2 * get("m") * get("n") * get("k")
  f = get("f32_gflops"); b = get("bf16_gflops")
  if (!(mdl in seen)) { seen[mdl] = 1; order[++nm] = mdl }
  if (f > 0) tf[mdl] += fl / f; if (b > 0) tb[mdl] += fl / b
  line[++nl] = sprintf("%-11s %-7s %-4s %6d %6d %6d %9.1f %9.1f %7.2fx  %s", mdl, get("linear"), get("op"),
    get("m"), get("n"), get("k"), f, b, (f > 0 ? b / f : 0), get("impl")) }
END {
  printf "%-11s %-7s %-4s %6s %6s %6s %9s %9s %8s  %s\n", "model", "linear", "op", "m", "n", "k", \
    "f32 GF/s", "bf16 GF/s", "bf16/f32", "bf16 path"
  for (i = 1; i <= nl; i++) print line[i]
  for (i = 1; i <= nm; i++) { mdl = order[i]
    printf "%-11s %-7s %-4s %20s %9s %9s %7.2fx  (time of all its products)\n", mdl, "all", "", "", "", "", \
      tf[mdl] / tb[mdl] }
}' "$out"
