#!/bin/sh
# make bench: mixed precision.  titan's training step (forward, cross-entropy,
# backward, clip, AdamW: what titan-train runs per step, tests/model/bench_model)
# in float32 and under torch.autocast's bfloat16 rules (float32 master weights
# and optimizer, bf16 linears through oneDNN, bf16 activations, float32 residual
# stream), against PyTorch eager on the same model, batch and threads with
# torch.autocast("cpu", dtype=torch.bfloat16) (and in float32 for reference):
# tokens/s, CPU seconds of all threads, peak RSS, and titan's activation bytes
# (what the model reports) and backend peak (what the backend measures).
#
# Environment: PYTHON (with torch; default python3), BENCH_THREADS (default: all
# cores), BENCH_STEPS (default 5), BENCH_QUICK=1 (debugmodel only),
# BENCH_ISA=avx2 (or another core/cpu_isa level): both sides run as on a
# processor of that level, titan through TITAN_CPU_ISA, PyTorch through
# ATEN_CPU_CAPABILITY and its oneDNN's ONEDNN_MAX_CPU_ISA (on a processor
# with AVX-512, avx2 shows what an AVX2-only one gets: titan's portable bf16
# path against PyTorch's emulated bf16, which takes about a minute a step on
# the 100M model: BENCH_STEPS=1 keeps that run to a few minutes).
# Figures on a shared machine are noisy: the four runs alternate, and the load
# is printed; CPU seconds are steadier than wall time there.  The last line is
# one core's arithmetic peak in float32 and in bf16 (tests/backend/bench_peak):
# their ratio bounds what bf16 can gain (2.00 on an AVX512-BF16 CPU without
# AMX, such as Zen 4).
set -eu
PYTHON=${PYTHON:-python3}
THREADS=${BENCH_THREADS:-$(nproc)}
STEPS=${BENCH_STEPS:-5}
BUILD=${BUILD:-build}
export OMP_NUM_THREADS="$THREADS"
case "${BENCH_ISA:-native}" in
native) ;;
avx2) export TITAN_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ;;
avx512) export TITAN_CPU_ISA=avx512 ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE ;;
baseline) export TITAN_CPU_ISA=baseline ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 ;;
*) echo "bench precision: BENCH_ISA=$BENCH_ISA: expected native, avx512, avx2 or baseline" >&2; exit 2 ;;
esac

if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
	echo "bench precision: $PYTHON cannot import torch (set PYTHON to an interpreter with torch from PyPI)" >&2
	exit 1
fi
make -s "$BUILD/tests/model/bench_model" "$BUILD/tests/backend/bench_peak" >&2

out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { # shape b t
	for p in float32 bfloat16; do
		"$BUILD/tests/model/bench_model" "$1" "$2" "$3" "$STEPS" none "$p" >>"$out"
		"$PYTHON" scripts/model_bench_torch.py "$1" "$2" "$3" "$STEPS" "$p" >>"$out"
	done
}
load0=$(cut -d' ' -f1-3 /proc/loadavg)
peak=$("$BUILD/tests/backend/bench_peak")
run debugmodel 4 256
[ "${BENCH_QUICK:-0}" = 1 ] || run 100M 2 256

echo "Mixed precision: titan vs PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') eager, CPU training step, $THREADS threads, median of $STEPS steps, load $load0 -> $(cut -d' ' -f1-3 /proc/loadavg)"
echo "titan: $("$BUILD/tests/model/bench_model" --describe 2>&1 | head -1); PyTorch: $("$PYTHON" -c 'import torch; print("ATen", torch.backends.cpu.get_cpu_capability())') ${ONEDNN_MAX_CPU_ISA:+ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA}"
awk '
function get(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
{ s = get("shape"); key = s SUBSEP get("impl") SUBSEP get("prec")
  tok[key] = get("tok_s"); cpu[key] = get("cpu_s"); rss[key] = get("peak_rss_mib")
  bpk[key] = get("backend_peak_mib"); act[key] = get("act_mib"); bt[s] = get("b") "x" get("t")
  if (!(s in seen)) { seen[s] = 1; order[++n] = s } }
END {
  printf "%-11s %-7s %-8s %10s %8s %9s %11s %9s\n", "shape", "impl", "prec", "tokens/s", "cpu s", \
    "RSS MiB", "backend MiB", "act MiB"
  for (i = 1; i <= n; i++) { s = order[i]
    for (j = 0; j < 4; j++) { im = j < 2 ? "titan" : "torch"; p = j % 2 ? "bfloat16" : "float32"; k = s SUBSEP im SUBSEP p
      printf "%-11s %-7s %-8s %10.1f %8.3f %9.0f %11s %9s\n", (j ? "" : s " " bt[s]), im, p, tok[k], cpu[k], rss[k], \
        (bpk[k] == "" ? "-" : sprintf("%.1f", bpk[k])), (act[k] == "" ? "-" : sprintf("%.1f", act[k])) }
    tb = s SUBSEP "titan" SUBSEP "bfloat16"; tf = s SUBSEP "titan" SUBSEP "float32"; pb = s SUBSEP "torch" SUBSEP "bfloat16"
    printf "%-11s titan bf16 / titan f32: %.2fx tokens/s (%.2fx CPU s); titan bf16 / torch bf16: %.2fx tokens/s (%.2fx CPU s); activations %.2fx\n", "", \
      tok[tb] / tok[tf], cpu[tf] / cpu[tb], tok[tb] / tok[pb], cpu[pb] / cpu[tb], act[tb] / act[tf] }
  print "goals: titan bf16 >= 2x titan float32 and >= 1.5x PyTorch bf16 (autocast)"
}' "$out"
# The ceiling: a bf16 GEMM gains at most this ratio over a float32 one here
# (tests/backend/bench_peak.c); the rest of a step (AdamW on float32 masters,
# norms, softmax, conversions) gains less, so a step's ratio stays below it.
echo "one core's peak: float32 FMA vs bf16 dot products: $peak"
