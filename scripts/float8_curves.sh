#!/bin/sh
# Float8 against bf16 on the CPU, the check torchtitan's users rely on: debugmodel
# on the demo corpus (configs/demo.toml: fortunes and the Jargon File, batch
# 8 x 128) trained under torchtitan's default bf16 autocast, and the same with
# model.converters = ["quantize.linear.float8"] for the tensorwise and the
# rowwise recipe (emulated: float8 values multiplied in float32, torchao's
# emulate=True), from the same seed and data.  Prints, for each recipe, the mean
# loss of the last STEPS/5 steps against bf16's, the largest step difference
# and the validation losses.  Not part of make check (a loaded 2-core machine
# needs the better part of an hour).  Fails unless each recipe's last-steps
# mean loss is within 1% of bf16's.
#
#   sh scripts/float8_curves.sh [STEPS]      (default 100; DIR=build/float8)
set -eu
STEPS=${1:-100}
D=${DIR:-build/float8}
B=${BIN:-bin}
mkdir -p "$D"

# The demo's corpus, tokenizer and shards (its own short training is not used).
DEMO_DIR="$D/demo" DEMO_STEPS=2 sh scripts/demo.sh >"$D/demo.log" 2>&1 || true
[ -d "$D/demo/data" ] || {
	echo "float8_curves: the demo data was not made (see $D/demo.log)" >&2
	exit 1
}
run() { # name, extra options
	name=$1
	shift
	"$B/titan-train" --config configs/demo.toml --job.dump_folder "$D/$name" \
		--training.dataset_path "$D/demo/data" --training.steps "$STEPS" \
		--checkpoint.enable false --metrics.log_freq 25 --validation.freq 50 "$@" \
		2>"$D/$name.log"
	grep -h 'Precision:\|Float8' "$D/$name.log" >&2 || true
	grep '^{"step":[0-9]*,"loss"' "$D/$name/metrics.jsonl" |
		sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/' >"$D/$name.loss"
	grep '"validation_loss"' "$D/$name/metrics.jsonl" |
		sed 's/^{"step":\([0-9]*\),"validation_loss":\([^,]*\),.*/\1 \2/' >"$D/$name.val"
}
run bf16
run tensorwise --model.converters quantize.linear.float8 --quantize.linear.float8.recipe_name tensorwise
run rowwise --model.converters quantize.linear.float8 --quantize.linear.float8.recipe_name rowwise

echo "debugmodel on the demo corpus, $STEPS steps: Float8 (emulated) against bf16 autocast"
status=0
for r in tensorwise rowwise; do
	join "$D/bf16.loss" "$D/$r.loss" | awk -v n="$STEPS" -v r="$r" '
	{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) { mx = d; at = $1 }
	  if ($1 > n - n / 5) { sb += $2; sf += $3; k++ } }
	END { rel = (sf / k - sb / k) / (sb / k)
	      printf "%-10s last %d steps: mean loss bf16 %.4f, %s %.4f (%+.2f%%); largest step difference %.4f (step %d)\n",
	             r, k, sb / k, r, sf / k, 100 * rel, mx, at
	      exit !(rel < 0.01 && rel > -0.01) }' || status=1
	join "$D/bf16.val" "$D/$r.val" | awk -v r="$r" '{ printf "%-10s validation step %d: bf16 %.4f, %s %.4f (%+.2f%%)\n", r, $1, $2, r, $3, 100 * ($3 - $2) / $2 }'
done
[ "$status" = 0 ] || echo "float8_curves: a Float8 curve is more than 1% from bf16's" >&2
exit "$status"
