#!/bin/sh
# FSDP2's mixed precision (mixed_precision_param bfloat16, reduce float32)
# in titan-train against one process in the same mode
# (training.mixed_precision_mode = "fully_shard"): debugmodel on the demo
# corpus (make demo's fortunes, t_demo_data), 200 steps of a global batch of
# 4 x 64 tokens, lr 3e-3 (20 warmup steps, cosine decay), seed 7.
#
# Same micro-batches: FSDP 2 (mpirun -np 2, 2 rows a rank) against one process
# running the same two micro-batches of 2 rows in turn (gradient accumulation)
# must give the same loss and grad norm at every step, to 1e-9 relative.
# Every row then sees the same bf16 parameters and the same products in the
# same order; the only reordering left is the grad norm's sum of squares
# (double, rank by rank: 1e-16), and the reduce-scatter's float32 sum of the
# two ranks' gradients is the accumulation's same sum.  Measured: the losses
# identical, the grad norms within 2e-16.  Anything FSDP casts, gathers or
# reduces otherwise than the one process shows at once (a float32 run
# differs by 3e-5 at step 1).
#
# Whole batch: one process on the 4 rows at once (torchtitan's comparison: one
# device, the same global batch).  Its weight gradients sum the rows' products
# in another order (float32: step 1's gradients agree to 1e-6 of each tensor's
# largest, tests/plan/test_plan.c); the step-1 loss, before any update, must
# agree to 1e-6 (measured 2e-15).  After that every fp32-ulp difference in a
# master weight that moves its bf16 copy across a rounding boundary changes an
# activation by a whole bf16 ulp (2^-8), and the two runs part like any two
# runs perturbed at that level: 2e-6 at step 2, 1e-4 at step 5, then the
# difference grows to the batch-to-batch noise of the loss and stays there.
# A bf16 run against a float32 one parts the same way (0.063 at worst here)
# so the bound is the noise's, not a fraction of the bf16-float32 gap: no step
# more than 0.25 apart (measured 0.12), the last 40 steps' means within 0.02
# (measured 0.0037; the per-step differences have a spread of about 0.025, so
# a 40-step mean of 4 sigma), and both losses falling by more than 1.5 nats.
# A wrong gradient (a shard lost, counted twice, a stale gather) moves the
# curve by more than that.
#
# Negative controls: the same-micro-batch comparison must fail at step 1
# (before any update) against one process in float32 and one under autocast
# (titan-train's default on one process: float32 norms and residual stream).  OMP_NUM_THREADS=1 everywhere: a fixed thread count keeps
# every run's reductions in a fixed order.  Under SAN=1 the runs are 12 steps
# and the statistical checks are skipped (too few steps to judge).
. tests/lib.sh
TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 NO_COLOR=1
t0=$(date +%s)

t_demo_data "$TMP/data"

STEPS=200
LAST=40
[ "${SAN:-0}" = 1 ] && STEPS=12 LAST=6
cat >"$TMP/job.toml" <<EOF
[model]
flavor = "debugmodel"
[optimizer]
lr = 3e-3
[lr_scheduler]
warmup_steps = 20
decay_type = "cosine"
min_lr_factor = 0.1
[training]
dataset_path = "$TMP/data"
global_batch_size = 4
seq_len = 64
steps = $STEPS
mixed_precision_param = "bfloat16"
mixed_precision_reduce = "float32"
[metrics]
log_freq = 50
[debug]
seed = 7
EOF

# one NAME [options]: one process, its log in NAME.log, its exit status in NAME.rc
one() {
	n=$1
	shift
	"$TRAIN" --config "$TMP/job.toml" --job.dump_folder "$TMP/$n" "$@" >"$TMP/$n.log" 2>&1
	echo $? >"$TMP/$n.rc"
}
t_run "fsdp: FSDP 2, 2 rows a rank" $MPIRUN -np 2 "$TRAIN" --config "$TMP/job.toml" \
	--job.dump_folder "$TMP/fsdp" --parallelism.data_parallel_shard_degree 2 \
	--training.local_batch_size 2
cp "$TMP/.err" "$TMP/fsdp.log"
t_grep "fsdp: FSDP's policy in force" 'Precision: fully_shard: parameters gathered in bfloat16' \
	"$TMP/fsdp.log"
# the one-process runs two at a time (one thread each)
FS="--training.mixed_precision_mode fully_shard"
one same $FS --training.local_batch_size 2 &
one whole $FS --training.local_batch_size 4
wait
one float32 --training.mixed_precision_param float32 --training.local_batch_size 2 \
	--training.steps 1 &
one autocast --training.local_batch_size 2 --training.steps 1
wait
for n in same whole float32 autocast; do
	if [ "$(cat "$TMP/$n.rc")" = 0 ]; then
		t_ok "one process: $n"
	else
		t_not_ok "one process: $n" "exit $(cat "$TMP/$n.rc"): $(tail -3 "$TMP/$n.log")"
	fi
done
t_grep "one process: FSDP's policy in force" \
	'Precision: fully_shard: parameters gathered in bfloat16' "$TMP/same.log"
t_grep "one process: autocast by default" 'Precision: autocast bfloat16' "$TMP/autocast.log"

curve() { # metrics.jsonl -> "step loss grad_norm" a line
	grep '^{"step":[0-9]*,"loss"' "$1" |
		sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),"grad_norm":\([^,]*\),.*/\1 \2 \3/'
}
for n in fsdp same whole float32 autocast; do
	curve "$TMP/$n/metrics.jsonl" >"$TMP/$n.curve"
done

# exact NAME FILE: FILE's losses and grad norms against FSDP's, every step
# within 1e-9 relative
exact() {
	join "$TMP/fsdp.curve" "$2" | awk -v n="$(wc -l <"$2")" '
		function rel(a, b) { d = (a - b) / b; return d < 0 ? -d : d }
		{ k++; l = rel($2, $4); g = rel($3, $5)
		  if (l > wl) { wl = l; sl = $1 } if (g > wg) { wg = g; sg = $1 } }
		END { printf "%s %d steps: loss %.1e (step %d), grad norm %.1e (step %d)\n",
			(k == n && k > 0 && wl <= 1e-9 && wg <= 1e-9) ? "ok" : "bad", k, wl, sl, wg, sg }' \
		>"$TMP/verdict"
	read -r v rest <"$TMP/verdict"
	[ "$v" = ok ]
}
if exact same "$TMP/same.curve" && [ "$(wc -l <"$TMP/same.curve")" -eq $STEPS ]; then
	t_ok "FSDP 2 = one process on the same micro-batches: worst $rest"
else
	t_not_ok "FSDP 2 = one process on the same micro-batches" "worst $rest"
fi
for n in float32 autocast; do
	if exact $n "$TMP/$n.curve"; then
		t_not_ok "the same comparison fails against $n" "it passed: $rest"
	else
		t_ok "the same comparison fails against $n at step 1: $rest"
	fi
done

# The whole batch in one process: step 1 alike, then within the noise.
join "$TMP/fsdp.curve" "$TMP/whole.curve" | awk -v n=$STEPS -v last=$LAST '
	{ d = $4 - $2; a = d < 0 ? -d : d; k++
	  if ($1 == 1) d1 = a
	  if (a > mx) { mx = a; at = $1 }
	  if ($1 <= 5) { f1 += $2; f2 += $4 }
	  if ($1 > n - last) { s1 += $2; s2 += $4; m++ } }
	END { md = (s2 - s1) / m; if (md < 0) md = -md
	      printf "%d %.2e %.4f %d %.4f %.4f %.4f %.2f %.2f\n", k, d1, mx, at, md, s1 / m, s2 / m,
		f1 / 5 - s1 / m, f2 / 5 - s2 / m }' >"$TMP/whole.cmp"
read -r k d1 mx at md m1 m2 drop1 drop2 <"$TMP/whole.cmp"
if [ "$k" -eq $STEPS ] && awk -v d="$d1" 'BEGIN { exit !(d <= 1e-6) }'; then
	t_ok "one process on the whole batch: step 1's loss within 1e-6 ($d1)"
else
	t_not_ok "one process on the whole batch: step 1's loss within 1e-6" "$k steps, $d1"
fi
if [ "${SAN:-0}" = 1 ]; then
	t_skip "one process on the whole batch: the curves within the noise" "$STEPS steps under the sanitizers"
elif awk -v mx="$mx" -v md="$md" -v a="$drop1" -v b="$drop2" \
	'BEGIN { exit !(mx <= 0.25 && md <= 0.02 && a > 1.5 && b > 1.5) }'; then
	t_ok "one process on the whole batch: largest step difference $mx (step $at), last $LAST steps' means $m1 and $m2, falls $drop1 and $drop2"
else
	t_not_ok "one process on the whole batch: the curves within the noise" \
		"largest step difference $mx (step $at, bound 0.25), last $LAST steps' means $m1 and $m2 (bound 0.02 apart), falls $drop1 and $drop2 (bound 1.5)"
fi
echo "# $(($(date +%s) - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
t_done
