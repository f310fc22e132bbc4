#!/bin/sh
# titan-train's precision modes end to end: the same job in float32 and under
# torchtitan's default bf16 autocast logs which mode is in force, and the two
# loss curves stay close (debugmodel, random tokens of a 256-word vocabulary,
# 60 steps of 4 x 32; scripts/precision_curves.sh runs the demo corpus for
# 200 steps).  Bound: the last 10 steps' mean losses within 0.005 and no step
# more than 0.01 apart (measured 0.0000 and 0.0008: about 10x below).
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1
t_random_shards "$TMP/data" 12 400 256 120 0.05

t_debugmodel_job "$TMP/job.toml" "$TMP/data" 60

for p in float32 bfloat16; do
	t_run "60 steps with mixed_precision_param $p" "$TRAIN" --config "$TMP/job.toml" \
		--job.dump_folder "$TMP/$p" --training.mixed_precision_param "$p"
	cp "$TMP/.err" "$TMP/$p.log"
done
t_grep "bf16: torchtitan's AMP line" 'Mixed precision training is handled by AMP$' "$TMP/bfloat16.log"
t_grep "bf16: autocast in force" 'Precision: autocast bfloat16: float32 master weights' "$TMP/bfloat16.log"
t_grep "float32: float32 throughout" 'Precision: autocast float32: float32 throughout' "$TMP/float32.log"

losses() { grep '^{"step":[0-9]*,"loss"' "$1" | sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
losses "$TMP/float32/metrics.jsonl" >"$TMP/a"
losses "$TMP/bfloat16/metrics.jsonl" >"$TMP/b"
verdict=$(join "$TMP/a" "$TMP/b" | awk '
	{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) mx = d; n++
	  if ($1 > 50) { s1 += $2; s2 += $3; k++ } }
	END { m = (s2 - s1) / k; if (m < 0) m = -m
	      printf "%s steps %d, largest step difference %.4f, last 10 mean float32 %.4f bf16 %.4f (difference %.4f)",
	             (n == 60 && k == 10 && mx < 0.01 && m < 0.005) ? "ok" : "bad", n, mx, s1 / k, s2 / k, m }')
case "$verdict" in
ok*) t_ok "loss curves within bounds: ${verdict#ok }" ;;
*) t_not_ok "loss curves within bounds" "${verdict#bad }" ;;
esac
t_done
