#!/bin/sh
# Loss curves of debugmodel on the demo corpus (configs/demo.toml: fortunes and
# the Jargon File, batch 8 x 128) trained in float32 and under torchtitan's
# bf16 autocast, from the same seed and data, side by side: the largest step
# difference, the mean difference over the last STEPS/5 steps, and the
# validation losses.  Not part of make check (half an hour of a loaded 2-core
# machine).  Fails unless the curves agree within: 0.05 at any step, 0.01 on
# the mean of the last STEPS/5 steps and on every validation loss.  Measured
# (200 steps, titan 2026-12): 0.012 at worst (step 129), 0.0004 on the last 40
# steps' means (3.6036 float32, 3.6031 bf16), validation within 0.0005.
#
#   sh scripts/precision_curves.sh [STEPS]      (default 200; DIR=build/precision)
set -eu
STEPS=${1:-200}
D=${DIR:-build/precision}
B=${BIN:-bin}

# The demo's corpus, tokenizer and shards (its own short training is not used).
DEMO_DIR="$D/demo" DEMO_STEPS=2 sh scripts/demo.sh >"$D.demo.log" 2>&1 || true
[ -f "$D/demo/data/manifest.json" ] || [ -d "$D/demo/data" ] || {
	echo "precision_curves: the demo data was not made (see $D.demo.log)" >&2
	exit 1
}
for p in float32 bfloat16; do
	"$B/titan-train" --config configs/demo.toml --job.dump_folder "$D/$p" \
		--training.dataset_path "$D/demo/data" --training.steps "$STEPS" \
		--training.mixed_precision_param "$p" --checkpoint.enable false \
		--metrics.log_freq 50 --validation.freq 50 2>"$D/$p.log"
	grep -h 'Precision:' "$D/$p.log" >&2
done
losses() { grep '^{"step":[0-9]*,"loss"' "$1" | sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
vals() { grep '"validation_loss"' "$1" | sed 's/^{"step":\([0-9]*\),"validation_loss":\([^,]*\),.*/\1 \2/'; }
losses "$D/float32/metrics.jsonl" >"$D/f32.loss"
losses "$D/bfloat16/metrics.jsonl" >"$D/bf16.loss"
vals "$D/float32/metrics.jsonl" >"$D/f32.val"
vals "$D/bfloat16/metrics.jsonl" >"$D/bf16.val"
echo "debugmodel on the demo corpus, $STEPS steps, float32 vs bf16 autocast"
status=0
join "$D/f32.loss" "$D/bf16.loss" | awk -v n="$STEPS" '
{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 }
  if ($1 > n - n / 5) { s32 += $2; s16 += $3; k++ } last32 = $2; last16 = $3 }
END { m = s16 / k - s32 / k
      printf "largest step difference %.4f (step %d); last %d steps: mean float32 %.4f, bf16 %.4f, difference %.4f\n",
      mx, at, k, s32 / k, s16 / k, m
      exit !(mx < 0.05 && m < 0.01 && m > -0.01) }' || status=1
join "$D/f32.val" "$D/bf16.val" | awk '{ d = $3 - $2; printf "validation step %d: float32 %.4f, bf16 %.4f, difference %+.4f\n", $1, $2, $3, d
	if (d > 0.01 || d < -0.01) bad = 1 } END { exit bad }' || status=1
[ "$status" = 0 ] || echo "precision_curves: the curves differ by more than the bounds" >&2
exit "$status"
