#!/bin/sh
# Training-step benchmark of titan's Llama 3 on the CPU backend against PyTorch
# eager, same shapes, batch and threads, in the same run: debugmodel and a ~100M
# parameter Llama (dim 768, 12 layers, GQA 12/4, vocab 16384).  One step =
# forward + cross-entropy + backward + clip + AdamW; the median of STEPS timed
# steps after one warm-up step.  Peak memory is each process's peak RSS.
#
# Environment: PYTHON (with torch; default python3), BENCH_THREADS (default: all
# cores), BENCH_STEPS (default 3), BENCH_QUICK=1 (debugmodel only).
# Numbers on a shared machine are noisy: the two sides alternate to share it.
set -eu
PYTHON=${PYTHON:-python3}
THREADS=${BENCH_THREADS:-$(nproc)}
STEPS=${BENCH_STEPS:-3}
BUILD=${BUILD:-build}
export OMP_NUM_THREADS="$THREADS"

if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
	echo "bench model: $PYTHON cannot import torch (set PYTHON to an interpreter with torch from PyPI)" >&2
	exit 1
fi
make -s "$BUILD/libtitan.a"
mkdir -p "$BUILD/bench"
${CC:-cc} -std=c17 -O2 -fopenmp -Wall -Wextra -Werror -Ilib -D_GNU_SOURCE \
	tests/model/bench_model.c "$BUILD/libtitan.a" -lopenblas -lm -lpthread \
	-o "$BUILD/bench/bench_model"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { # shape b t
	"$BUILD/bench/bench_model" "$1" "$2" "$3" "$STEPS" >>"$out"
	"$PYTHON" scripts/model_bench_torch.py "$1" "$2" "$3" "$STEPS" >>"$out"
}
run debugmodel 4 256
[ "${BENCH_QUICK:-0}" = 1 ] || run 100M 2 256

echo "titan vs PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') eager, CPU training step, $THREADS threads, median of $STEPS steps"
awk '
function get(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } }
{ impl = get("impl"); s = get("shape"); key = s SUBSEP impl
  step[key] = get("step_s"); tok[key] = get("tok_s"); rss[key] = get("peak_rss_mib")
  par[s] = get("params"); bt[s] = get("b") "x" get("t"); if (!(s in seen)) { seen[s] = 1; order[++n] = s } }
END {
  printf "%-11s %11s %7s %6s %10s %10s %12s %12s %8s %8s\n", "shape", "params", "batch", "", \
    "titan s", "torch s", "titan tok/s", "torch tok/s", "speedup", "mem"
  for (i = 1; i <= n; i++) { s = order[i]
    printf "%-11s %11d %7s %6s %10.3f %10.3f %12.1f %12.1f %7.2fx %7.2fx\n", s, par[s], bt[s], "", \
      step[s, "titan"], step[s, "torch"], tok[s, "titan"], tok[s, "torch"], \
      step[s, "torch"] / step[s, "titan"], rss[s, "torch"] / rss[s, "titan"]
    printf "%-11s %11s %7s %6s %10s %10s peak RSS MiB: titan %.0f, torch %.0f\n", "", "", "", "", "", "", \
      rss[s, "titan"], rss[s, "torch"] }
  print "speedup = torch step time / titan step time; mem = torch peak RSS / titan peak RSS (higher is better for titan)"
}' "$out"
