#!/bin/sh
# titan-ckpt-convert against a checkpoint written by torchtitan itself:
# tests/ckpt/golden/torchtitan/step-2 is what torchtitan 0.2.2's
# CheckpointManager.save(curr_step=2) wrote after two AdamW steps of its own
# Llama 3 model (dim 32, 2 layers, 4 heads, 2 KV heads, vocab 256) with its
# own optimizer and lr scheduler containers (scripts/ckpt_torchtitan_golden.py).
# Beside it, written from the live objects and not from the checkpoint:
# model.safetensors (every model tensor) and expect.pt (the AdamW state of
# layers.0.attention.wq.weight and the lr scheduler's state, nested as DCP
# flattens them).
. tests/lib.sh
C="$BIN/titan-ckpt-convert"
G=tests/ckpt/golden/torchtitan
D="$G/step-2"

t_run "verify accepts the folder torchtitan's CheckpointManager wrote" "$C" verify "$D"
t_grep "verify counts every item" '343 keys, 343 stored items' "$TMP/.out"

"$C" info --json "$D" >"$TMP/info.json" 2>"$TMP/info.err"
t_grep "info --json: model weights at the top level, as torchtitan saves them" \
	'"name": "layers.1.feed_forward.w2.weight"' "$TMP/info.json"
t_grep "info --json: AdamW exp_avg of every parameter" \
	'"name": "optimizer.state.tok_embeddings.weight.exp_avg"' "$TMP/info.json"
t_grep "info --json: lr scheduler state" '"name": "lr_scheduler.last_epoch"' "$TMP/info.json"
t_grep "info --json: the dataloader entry (None)" '"name": "dataloader"' "$TMP/info.json"
"$C" info "$D" >"$TMP/info.txt" 2>&1
t_grep "info reports DCP version 1.0.0" 'DCP version 1.0.0' "$TMP/info.txt"

# Every model tensor of A is in B, bit for bit (B may hold more: optimizer
# and scheduler state); exactly 21 compared.
model_exact() { # name A B
	"$C" diff "$2" "$3" >"$TMP/m.diff" 2>"$TMP/m.err"
	ok=$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/m.diff")
	bad=$(grep -v -e ' ok ' -e 'only-in-B' "$TMP/m.diff" | wc -l)
	if [ "$ok" -eq 21 ] && [ "$bad" -eq 0 ]; then
		t_ok "$1"
	else
		t_not_ok "$1" "$ok equal, $bad other: $(grep -v -e ' ok ' -e only-in-B "$TMP/m.diff" | head -3) $(cat "$TMP/m.err")"
	fi
}

# Every model tensor, as titan reads it from the DCP folder, equals the copy
# safetensors saved from the live model.
model_exact "all 21 model tensors read from torchtitan's DCP equal safetensors' copy bit for bit" \
	"$G/model.safetensors" "$D"

# The same through a single file: dcp-to-single, then compare the files.
"$C" dcp-to-single "$D" "$TMP/one.safetensors" >/dev/null 2>"$TMP/one.err"
model_exact "dcp-to-single .safetensors of torchtitan's checkpoint holds the model's tensors bit for bit" \
	"$G/model.safetensors" "$TMP/one.safetensors"
"$C" dcp-to-single "$D" "$TMP/m.safetensors" --model-only >/dev/null 2>&1
"$C" diff "$TMP/m.safetensors" "$G/model.safetensors" >"$TMP/mo.diff" 2>&1
n=$(grep -c ' ok ' "$TMP/mo.diff")
other=$(grep -vc ' ok ' "$TMP/mo.diff")
if [ "$n" -eq 21 ] && [ "$other" -eq 0 ]; then
	t_ok "dcp-to-single --model-only keeps exactly torchtitan's 21 model tensors"
else
	t_not_ok "dcp-to-single --model-only keeps exactly torchtitan's 21 model tensors" \
		"$n equal, $other other: $(grep -v ' ok ' "$TMP/mo.diff" | head -3)"
fi
"$C" dcp-to-single "$D" "$TMP/all.pt" >/dev/null 2>&1
t_run "dcp-to-single .pt keeps every item of torchtitan's checkpoint, values included" \
	"$C" diff "$D" "$TMP/all.pt"

# Optimizer and scheduler state: AdamW step, exp_avg and exp_avg_sq of one
# parameter (tensors, exact) and every lr_scheduler entry (pickled values,
# compared after unpickling) against the live objects' copies.
"$C" diff "$G/expect.pt" "$D" >"$TMP/o.diff" 2>"$TMP/o.err"
for k in optimizer.state.layers.0.attention.wq.weight.exp_avg \
	optimizer.state.layers.0.attention.wq.weight.exp_avg_sq \
	optimizer.state.layers.0.attention.wq.weight.step \
	lr_scheduler.last_epoch lr_scheduler._step_count lr_scheduler._last_lr lr_scheduler.base_lrs; do
	t_grep "$k read from torchtitan's checkpoint equals the live value" "^$k  *ok  *max_abs 0 max_rel 0" "$TMP/o.diff"
done
bad=$(grep -v -e ' ok ' -e 'only-in-B' "$TMP/o.diff" | wc -l)
[ "$bad" -eq 0 ] && t_ok "no optimizer or scheduler value differs" ||
	t_not_ok "no optimizer or scheduler value differs" "$(grep -v -e ' ok ' -e only-in-B "$TMP/o.diff" | head -3)"

# Resharding torchtitan's checkpoint as a 2-rank FSDP run would keeps it whole.
"$C" reshard "$D" "$TMP/r2" --chunks 2 >/dev/null 2>&1
t_run "torchtitan's checkpoint resharded into 2 ranks verifies" "$C" verify "$TMP/r2"
t_run "torchtitan's checkpoint resharded into 2 ranks keeps every value" "$C" diff "$D" "$TMP/r2"

t_done
