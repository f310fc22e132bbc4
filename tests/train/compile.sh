#!/bin/sh
# compile.enable: titan-train runs its fused ops where torchtitan compiles
# (compile.components "model": the q, k, v product with RoPE fused into the
# split and the norms' backward fused with the residual gradient; "loss": the
# output projection fused with the cross-entropy over the logits' chunks), and
# says so in the log.  The same 20-step job (debugmodel, random tokens of a
# 256-word vocabulary, 4 x 32) with and without it: in float32 the loss curves
# agree within 1e-5 at every step (the fused products sum in another order:
# measured 4.4e-8), under the default bf16 autocast within 2e-3 (a float32
# difference may flip a bf16 rounding: measured 5.3e-4;
# tests/model/test_model_fused.c measures one step).  With compile.enable the
# whole step runs queued without a wait for the backend (plan_set_graph: on
# the CUDA backend one CUDA graph); on the CPU its curve equals the fused ops'
# alone (--no-step-graph) bit for bit, and the log says so, or why not (no
# "loss" component).  An unknown component is refused.
. tests/lib.sh

TRAIN="$BIN/titan-train"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1
t_random_shards "$TMP/data" 12 400 256 120 0.05
cat >"$TMP/job.toml" <<EOF2
[model]
flavor = "debugmodel"
[optimizer]
lr = 2e-3
[lr_scheduler]
warmup_steps = 5
[training]
dataset_path = "$TMP/data"
local_batch_size = 4
seq_len = 32
steps = 20
[metrics]
log_freq = 10
[debug]
seed = 7
EOF2

losses() { grep '^{"step":[0-9]*,"loss"' "$1" | sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
for p in float32 bfloat16; do
	for c in false true; do
		t_run "$p, compile.enable $c" "$TRAIN" --config "$TMP/job.toml" \
			--job.dump_folder "$TMP/$p-$c" --training.mixed_precision_param "$p" \
			--compile.enable "$c"
		cp "$TMP/.err" "$TMP/$p-$c.log"
		losses "$TMP/$p-$c/metrics.jsonl" >"$TMP/$p-$c.loss"
	done
	bound=1e-5
	[ "$p" = bfloat16 ] && bound=2e-3
	report=$(join "$TMP/$p-false.loss" "$TMP/$p-true.loss" | awk -v b="$bound" '
		{ d = $3 - $2; if (d < 0) d = -d; if (d > mx) mx = d; k++ }
		END { printf "%d steps, largest difference %.2e (bound %s)\n", k, mx, b
		      exit !(k == 20 && mx <= b) }')
	if [ $? -eq 0 ]; then t_ok "$p: the curves agree: $report"; else t_not_ok "$p: the curves agree" "$report"; fi
done
t_grep "the log says what is fused in the blocks" 'Compiling each TransformerBlock' "$TMP/float32-true.log"
t_grep "  and for the loss" 'Compiling the loss function' "$TMP/float32-true.log"
if grep -q 'Compiling' "$TMP/float32-false.log"; then
	t_not_ok "nothing compiled without compile.enable" "$(grep Compiling "$TMP/float32-false.log")"
else
	t_ok "nothing compiled without compile.enable"
fi
t_grep "the whole step runs queued on the device" 'Compiling the whole step (forward, backward, grad norm, clipping, AdamW): queued' "$TMP/float32-true.log"
t_run "float32, compile.enable without the step graph" "$TRAIN" --config "$TMP/job.toml" \
	--job.dump_folder "$TMP/float32-nograph" --training.mixed_precision_param float32 \
	--compile.enable true --no-step-graph
losses "$TMP/float32-nograph/metrics.jsonl" >"$TMP/float32-nograph.loss"
if [ -s "$TMP/float32-nograph.loss" ] && cmp -s "$TMP/float32-nograph.loss" "$TMP/float32-true.loss"; then
	t_ok "  its curve is the step graph's, bit for bit"
else
	t_not_ok "  its curve is the step graph's, bit for bit" "$(diff "$TMP/float32-nograph.loss" "$TMP/float32-true.loss" | head -5)"
fi
t_run "compile.components without \"loss\"" "$TRAIN" --config "$TMP/job.toml" \
	--job.dump_folder "$TMP/model-only" --training.steps 2 --compile.enable \
	--compile.components model
t_grep "  the log says why the whole step is not compiled" 'Compiling the whole step: not done, steps run op by op: compile.components lacks "loss"' "$TMP/.err"
t_fails "an unknown compile component is refused" 1 "$TRAIN" --config "$TMP/job.toml" \
	--job.dump_folder "$TMP/bad" --compile.enable --compile.components model,optimizer
t_grep "  naming it" 'compile.components: "optimizer" is not "model" or "loss"' "$TMP/.err"
t_done
