#!/bin/sh
# Training-step benchmark of the families beyond Llama 3 on the CPU backend
# against PyTorch eager with transformers' own modules, same shapes, batch and
# threads, in the same run: Qwen3's debugmodel (dense, 32M parameters) and
# debugmodel_moe (64 experts of 768, top 8: 316M parameters, 52M active).
# One step = forward + cross-entropy + backward + clip + AdamW; the median of
# STEPS timed steps after one warm-up step.  Peak memory is each process's peak
# RSS.  tests/model/bench_model.c is titan's side, scripts/family_bench_torch.py
# PyTorch's.
#
# Environment: PYTHON (with torch and transformers; default python3),
# BENCH_THREADS (default: all cores), BENCH_STEPS (default 3), BENCH_B and
# BENCH_T (default 2 x 128).  Numbers on a shared machine are noisy: the two
# sides alternate to share it, and CPU seconds are printed beside wall time.
set -eu
PYTHON=${PYTHON:-python3}
THREADS=${BENCH_THREADS:-$(nproc)}
STEPS=${BENCH_STEPS:-3}
B=${BENCH_B:-2}
T=${BENCH_T:-128}
BUILD=${BUILD:-build}
export OMP_NUM_THREADS="$THREADS"

if ! "$PYTHON" -c 'import torch, transformers' 2>/dev/null; then
	echo "bench family: $PYTHON cannot import torch and transformers (set PYTHON to an interpreter with them from PyPI)" >&2
	exit 1
fi
make -s "$BUILD/tests/model/bench_model" >&2

out=$(mktemp)
trap 'rm -f "$out"' EXIT
for shape in qwen3:debugmodel qwen3:debugmodel_moe; do
	"$BUILD/tests/model/bench_model" "$shape" "$B" "$T" "$STEPS" >>"$out"
	"$PYTHON" scripts/family_bench_torch.py "$shape" "$B" "$T" "$STEPS" 2>/dev/null >>"$out"
done

echo "titan vs PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) eager (transformers $("$PYTHON" -c 'import transformers; print(transformers.__version__)' 2>/dev/null)), CPU training step, $THREADS threads, median of $STEPS steps, load $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
function get(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } }
{ impl = get("impl"); s = get("shape"); key = s SUBSEP impl
  step[key] = get("step_s"); cpu[key] = get("cpu_s"); tok[key] = get("tok_s"); rss[key] = get("peak_rss_mib")
  par[s] = get("params"); bt[s] = get("b") "x" get("t"); if (!(s in seen)) { seen[s] = 1; order[++n] = s } }
END {
  printf "%-22s %11s %7s %10s %10s %12s %12s %8s %8s\n", "family:flavor", "params", "batch", \
    "titan s", "torch s", "titan tok/s", "torch tok/s", "speedup", "mem"
  for (i = 1; i <= n; i++) { s = order[i]
    printf "%-22s %11d %7s %10.3f %10.3f %12.1f %12.1f %7.2fx %7.2fx\n", s, par[s], bt[s], \
      step[s, "titan"], step[s, "torch"], tok[s, "titan"], tok[s, "torch"], \
      step[s, "torch"] / step[s, "titan"], rss[s, "torch"] / rss[s, "titan"]
    printf "%-22s %11s %7s %10.3f %10.3f %12s %12s %7.2fx   (CPU seconds of all threads)\n", "", "", "", \
      cpu[s, "titan"], cpu[s, "torch"], "", "", cpu[s, "torch"] / cpu[s, "titan"]
    printf "%-22s %11s %7s peak RSS MiB: titan %.0f, torch %.0f\n", "", "", "", rss[s, "titan"], rss[s, "torch"] }
  print "speedup = torch step time / titan step time (wall, then CPU); mem = torch peak RSS / titan peak RSS"
}' "$out"
