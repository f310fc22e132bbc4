#!/bin/sh
# Loss curves of debugmodel on the demo corpus (configs/demo.toml: fortunes and
# the Jargon File, batch 8 x 128) trained in float32 and under torchtitan's
# bf16 autocast, from the same seed and data, side by side: the largest step
# difference, the mean difference over the last STEPS/5 steps, and the
# validation losses.  Not part of make check (minutes of CPU).
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
join "$D/f32.loss" "$D/bf16.loss" | awk -v n="$STEPS" '
{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 }
  if ($1 > n - n / 5) { s32 += $2; s16 += $3; k++ } last32 = $2; last16 = $3 }
END { printf "largest step difference %.4f (step %d); last %d steps: mean float32 %.4f, bf16 %.4f, difference %.4f\n",
      mx, at, k, s32 / k, s16 / k, s16 / k - s32 / k }'
join "$D/f32.val" "$D/bf16.val" | awk '{ printf "validation step %d: float32 %.4f, bf16 %.4f, difference %+.4f\n", $1, $2, $3, $3 - $2 }'
