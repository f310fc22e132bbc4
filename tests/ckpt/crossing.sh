#!/bin/sh
# Checkpoints cross between titan-train and torchtitan 0.2.2, both ways, on
# the debugmodel flavor (embedding and output of vocab_size 2048 rows, as
# torchtitan sizes them, with data of a 256-token vocabulary):
#   titan -> torchtitan: torchtitan's CheckpointManager loads titan's seed
#     checkpoint (the same weights bit for bit) and its full step-3 checkpoint
#     (model, AdamW, lr scheduler, train_state), and its step 4 gives titan's
#     loss and weights;
#   torchtitan -> titan: titan-train resumes torchtitan's step-2 checkpoint
#     (its data loader state is a pickle titan cannot read: titan resumes the
#     data from train_state.ntokens_seen) and its step 3 gives torchtitan's
#     loss and weights.
# The torchtitan side is scripts/ckpt_crossing.py.  Needs $PYTHON with torch,
# safetensors and torchtitan 0.2.2; skipped otherwise (as in CI):
#   PYTHON=/path/to/venv/bin/python make check TITAN_TEST_FILTER=crossing
. tests/lib.sh

GEN="$BUILD/tests/shard/test_gen"
TRAIN="$BIN/titan-train"
C="$BIN/titan-ckpt-convert"
PY="${PYTHON:-python3}"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1

if ! "$PY" -c 'import torch, safetensors, torchtitan, importlib.metadata as m; assert m.version("torchtitan") == "0.2.2"' \
	>/dev/null 2>&1; then
	t_skip "checkpoints cross between titan-train and torchtitan" \
		"no torchtitan 0.2.2 in \$PYTHON ($PY); run with PYTHON=<venv>/bin/python"
	t_done
fi

"$GEN" gen 5 200 256 120 >"$TMP/s.tts"
"$BIN/titan-shard" -q --out "$TMP/data" --val-fraction 0.05 "$TMP/s.tts"
"$BIN/titan-shard" cat --split train "$TMP/data" >"$TMP/train.tts"

# The settings of scripts/ckpt_crossing.py's job_config().  Both sides compute
# in float32 (no autocast): the crossing is of the state, compared closely.
cat >"$TMP/cross.toml" <<EOF
[model]
flavor = "debugmodel"
[optimizer]
lr = 1e-3
[lr_scheduler]
warmup_steps = 2
total_steps = 10
[training]
dataset_path = "$TMP/data"
local_batch_size = 2
seq_len = 16
max_norm = 1.0
mixed_precision_param = "float32"
[checkpoint]
enable = true
interval = 100
keep_latest_k = 0
last_save_model_only = false
[activation_checkpoint]
mode = "none"
[debug]
seed = 42
EOF

loss_at() { # metrics.jsonl STEP
	grep "^{\"step\":$2,\"loss\"" "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'
}

close_to() { # NAME TITAN TORCHTITAN RELATIVE-TOLERANCE
	if awk -v a="$2" -v b="$3" -v r="$4" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= r * b) }'; then
		t_ok "$1 ($2, $3)"
	else
		t_not_ok "$1" "titan $2, torchtitan $3"
	fi
}

# titan -> torchtitan.
A="$TMP/a"
t_run "titan writes a seed checkpoint" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$A" \
	--checkpoint.create_seed_checkpoint
t_run "titan trains 3 steps from it" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$A" \
	--training.steps 3
cp -r "$A/checkpoint/step-3" "$TMP/step-3.saved"
t_run "titan trains step 4" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$A" --training.steps 4
loss_at "$A/metrics.jsonl" 4 >"$TMP/loss4"
"$C" dcp-to-single "$A/checkpoint/step-0" "$TMP/seed.safetensors" >/dev/null 2>&1
"$C" dcp-to-single "$A/checkpoint/step-4" "$TMP/step4.safetensors" --model-only >/dev/null 2>&1
rm -rf "$A/checkpoint/step-4"
t_run "torchtitan loads titan's seed and step-3 checkpoints and its step 4 matches titan's" \
	"$PY" scripts/ckpt_crossing.py titan-to-torchtitan "$A" "$TMP/train.tts" "$TMP/seed.safetensors" \
	"$TMP/loss4" "$TMP/step4.safetensors"
sed 's/^/# /' "$TMP/.out"

# torchtitan -> titan.
B="$TMP/b"
t_run "torchtitan trains 2 steps and saves step-2" \
	"$PY" scripts/ckpt_crossing.py torchtitan-to-titan "$B" "$TMP/train.tts" "$TMP/loss3" \
	"$TMP/tt3.safetensors"
t_run "titan-train resumes torchtitan's step-2 and trains step 3" \
	"$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$B" --training.steps 3
t_grep "titan resumes torchtitan's data position from ntokens_seen" \
	'resumes after train_state.ntokens_seen = 64 tokens (4 windows)' "$TMP/.err"
t_grep "titan starts at step 3" 'Training starts at step 3' "$TMP/.err"
close_to "step 3 after torchtitan's step-2: titan's loss is torchtitan's" \
	"$(loss_at "$B/metrics.jsonl" 3)" "$(cat "$TMP/loss3")" 1e-4
"$C" dcp-to-single "$B/checkpoint/step-3" "$TMP/b3.safetensors" --model-only >/dev/null 2>&1
"$C" diff "$TMP/tt3.safetensors" "$TMP/b3.safetensors" --tol 2e-6 >"$TMP/b3.diff" 2>&1
bad=$(grep -vc ' ok ' "$TMP/b3.diff")
n=$(grep -c ' ok ' "$TMP/b3.diff")
if [ "$n" -eq 57 ] && [ "$bad" -eq 0 ]; then
	t_ok "step 3 weights: titan's equal torchtitan's within 2e-6 (57 tensors)"
else
	t_not_ok "step 3 weights: titan's equal torchtitan's within 2e-6" "$n ok, $bad other: $(grep -v ' ok ' "$TMP/b3.diff" | head -3)"
fi

# HF safetensors both ways (checkpoint.last_save_in_hf, initial_load_in_hf).
t_run "titan's last save in HF safetensors" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$TMP/h" \
	--training.steps 2 --checkpoint.last_save_model_only --checkpoint.last_save_in_hf \
	--model.hf_assets_path "$TMP/none"
t_run "the same run with a DCP last save" "$TRAIN" --config "$TMP/cross.toml" --job.dump_folder "$TMP/hd" \
	--training.steps 2 --checkpoint.last_save_model_only
"$C" dcp-to-single "$TMP/hd/checkpoint/step-2" "$TMP/hd2.safetensors" --model-only >/dev/null 2>&1
t_run "torchtitan's initial_load_in_hf loads titan's HF last save: the model, bit for bit" \
	"$PY" scripts/ckpt_crossing.py hf-load "$TMP/h/checkpoint/step-2" "$TMP/hd2.safetensors"
sed 's/^/# /' "$TMP/.out"
t_run "torchtitan's last_save_in_hf" "$PY" scripts/ckpt_crossing.py hf-save "$TMP/g" "$TMP/train.tts" \
	"$TMP/loss1" "$TMP/g.safetensors"
sed 's/^/# /' "$TMP/.out"
"$C" from-hf "$TMP/g/checkpoint/step-1" "$TMP/g-dcp" --flavor debugmodel >/dev/null 2>"$TMP/fromhf.err"
"$C" diff "$TMP/g.safetensors" "$TMP/g-dcp" >"$TMP/g.diff" 2>&1
n=$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/g.diff")
[ "$n" -eq 57 ] && t_ok "titan reads torchtitan's HF last save as torchtitan's model, bit for bit" ||
	t_not_ok "titan reads torchtitan's HF last save as torchtitan's model" "$n equal: $(head -3 "$TMP/g.diff") $(cat "$TMP/fromhf.err")"
t_run "titan-train starts from torchtitan's HF last save (initial_load_in_hf)" "$TRAIN" \
	--config "$TMP/cross.toml" --job.dump_folder "$TMP/gt" --training.steps 1 \
	--checkpoint.initial_load_in_hf --checkpoint.initial_load_path "$TMP/g/checkpoint/step-1"
close_to "its first loss is torchtitan's on the same batch" \
	"$(loss_at "$TMP/gt/metrics.jsonl" 1)" "$(cat "$TMP/loss1")" 1e-5

t_done
