#!/bin/sh
# Attention of packed documents on the CPU: titan-bench attention --docs (the
# backend's attention with be_attn.doc, torchtitan 0.3.0's block-causal mask)
# beside the plain causal rows, and torch's scaled_dot_product_attention on
# the same shapes, causal and with the same mask as a dense boolean tensor
# (scripts/attention_bench_torch.py; PYTHON with torch, else those rows say so).
# TFLOP/s over the (query, key) pairs each mask leaves, on both sides.
#
# Environment: BENCH_ATTN (B,T,H,HKV,HD; default 1,2048,32,8,128: Llama 3 8B's
# heads), BENCH_DOCS (default 8), BENCH_THREADS (default: all cores),
# BENCH_SECONDS (default 1), PYTHON.  Numbers on a shared machine are noisy.
set -eu
BIN=${BIN:-bin}
PY=${PYTHON:-python3}
SHAPE=${BENCH_ATTN:-1,2048,32,8,128}
DOCS=${BENCH_DOCS:-8}
THREADS=${BENCH_THREADS:-$(nproc)}
S=${BENCH_SECONDS:-1}
export OMP_NUM_THREADS="$THREADS"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$BIN/titan-bench" attention --json --attention-shape "$SHAPE" --docs "$DOCS" \
	--threads "$THREADS" --seconds "$S" |
	jq -r '.rows[] | "impl=titan mask=\(.mask | gsub(" "; "_")) pass=\(.pass) dtype=\(.dtype) ms=\(.ms) tflops=\(.tflops)"' >"$out"
if "$PY" -c 'import torch' 2>/dev/null; then
	# shellcheck disable=SC2046
	"$PY" scripts/attention_bench_torch.py $(echo "$SHAPE" | tr ',' ' ') "$DOCS" "$S" >>"$out"
else
	echo "torch: not available: $PY cannot import torch (set PYTHON)"
fi
echo "attention $SHAPE, $DOCS documents a row, $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
function get(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } }
{ key = get("mask") SUBSEP get("pass") SUBSEP get("dtype"); impl = get("impl")
  ms[key, impl] = get("ms"); tf[key, impl] = get("tflops")
  if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
END {
  printf "%-8s %-9s %-5s %10s %10s %12s %12s %8s\n", "mask", "pass", "dtype", "titan ms", "torch ms", \
    "titan TF/s", "torch TF/s", "speedup"
  for (i = 1; i <= n; i++) { split(order[i], p, SUBSEP); k = order[i]
    tm = ((k, "torch") in ms) ? ms[k, "torch"] : "-"; tt = ((k, "torch") in tf) ? tf[k, "torch"] : "-"
    printf "%-8s %-9s %-5s %10.3f %10s %12.4f %12s %8s\n", p[1], p[2], p[3], ms[k, "titan"], tm, \
      tf[k, "titan"], tt, tm == "-" ? "-" : sprintf("%.2fx", tm / ms[k, "titan"]) } }' "$out"
