#!/bin/sh
# titan-train as a drop-in for torchtitan and under abuse: the vocabulary is
# the flavor's, data that does not fit it is refused, HF checkpoints in and
# out, one run per dump folder, leftovers of killed runs cleaned up, write
# errors of the listing options.
. tests/lib.sh

GEN="$BUILD/tests/shard/test_gen"
TRAIN="$BIN/titan-train"
C="$BIN/titan-ckpt-convert"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1

"$GEN" gen 3 120 256 100 >"$TMP/s.tts"
"$BIN/titan-shard" -q --out "$TMP/data" --val-fraction 0.1 "$TMP/s.tts"
cat >"$TMP/tiny.toml" <<EOF
[model]
flavor = "debugmodel"
[training]
dataset_path = "$TMP/data"
local_batch_size = 2
seq_len = 16
steps = 2
[checkpoint]
enable = true
interval = 1
keep_latest_k = 0
last_save_model_only = false
[activation_checkpoint]
mode = "none"
[debug]
seed = 1
EOF

# The vocabulary is the flavor's (torchtitan's), not the tokenizer's.
t_run "2 steps on data of a 256-id vocabulary" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/v"
t_grep "the model is built with the flavor's vocab_size" 'Building llama3 debugmodel with vocab_size 2048,' "$TMP/.err"
"$C" info "$TMP/v/checkpoint/step-2" >"$TMP/info" 2>&1
t_grep "the embedding has 2048 rows" '^tok_embeddings.weight .*(2048, 256)' "$TMP/info"
t_grep "the output has 2048 rows" '^output.weight .*(2048, 256)' "$TMP/info"

"$GEN" gen 3 50 4096 100 >"$TMP/big.tts"
"$BIN/titan-shard" -q --out "$TMP/big" --val-fraction 0.1 "$TMP/big.tts"
t_fails "data of a 4096-id vocabulary is refused on debugmodel (2048)" 1 \
	"$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/w" --training.dataset_path "$TMP/big"
t_grep "the refusal says why" 'holds ids of a 4096-token vocabulary, more than the 2048 of model.flavor "debugmodel"' "$TMP/.err"

# HF safetensors in the trainer (torchtitan's checkpoint.initial_load_in_hf and
# last_save_in_hf).  Run H ends with an HF last save; run D is the same run
# with a model-only DCP last save: the HF files are D's model exported.
t_run "last_save_in_hf writes the last step as HF safetensors" "$TRAIN" --config "$TMP/tiny.toml" \
	--job.dump_folder "$TMP/h" --checkpoint.last_save_model_only --checkpoint.last_save_in_hf \
	--model.hf_assets_path "$TMP/none"
H2="$TMP/h/checkpoint/step-2"
if [ -f "$H2/model-00001-of-00001.safetensors" ] && [ -f "$H2/model.safetensors.index.json" ] &&
	[ ! -e "$H2/.metadata" ]; then
	t_ok "one file and its index, as torch's HuggingFaceStorageWriter names them"
else
	t_not_ok "one file and its index, as torch's HuggingFaceStorageWriter names them" "$(ls -A "$H2" 2>&1)"
fi
t_grep "the HF folder holds HF names" '"model.layers.5.self_attn.q_proj.weight": "model-00001-of-00001.safetensors"' \
	"$H2/model.safetensors.index.json"
t_run "the same run with a DCP last save" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/d" \
	--checkpoint.last_save_model_only
"$C" to-hf "$TMP/d/checkpoint/step-2" "$TMP/d-hf" --flavor debugmodel >/dev/null 2>&1
"$C" diff "$TMP/d-hf" "$H2" >"$TMP/hf.diff" 2>&1
n=$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/hf.diff")
if [ "$n" -eq 57 ] && [ "$(grep -vc ' ok ' "$TMP/hf.diff")" -eq 0 ]; then
	t_ok "the HF last save equals titan-ckpt-convert to-hf of the model, bit for bit (57 tensors)"
else
	t_not_ok "the HF last save equals to-hf of the model" "$n equal: $(grep -v ' ok ' "$TMP/hf.diff" | head -3)"
fi
t_run "a run of 2 steps is already done after its HF last save" "$TRAIN" --config "$TMP/tiny.toml" \
	--job.dump_folder "$TMP/h" --checkpoint.last_save_model_only --checkpoint.last_save_in_hf
t_grep "the HF step folder counts as the run's latest step" 'Step 2 already reached' "$TMP/.err"

# With model.hf_assets_path holding a sharded HF model, the last save is
# sharded as its index says (torchtitan's fqn_to_index_mapping).
"$C" to-hf "$TMP/d/checkpoint/step-2" "$TMP/assets" --flavor debugmodel --max-shard-size 2M >/dev/null 2>&1
t_run "last_save_in_hf with a sharded model in hf_assets_path" "$TRAIN" --config "$TMP/tiny.toml" \
	--job.dump_folder "$TMP/hs" --checkpoint.last_save_model_only --checkpoint.last_save_in_hf \
	--model.hf_assets_path "$TMP/assets"
t_same "its files and index are the assets' layout" "$TMP/assets/model.safetensors.index.json" \
	"$TMP/hs/checkpoint/step-2/model.safetensors.index.json"

# Starting from the HF folder or from the same model as a DCP folder trains
# the same step, bit for bit: the HF import undoes the export exactly.
t_run "initial_load_in_hf starts from an HF folder" "$TRAIN" --config "$TMP/tiny.toml" \
	--job.dump_folder "$TMP/i" --training.steps 1 --checkpoint.initial_load_in_hf \
	--checkpoint.initial_load_path "$H2"
t_grep "it says where it loads from, as torchtitan does" \
	"loading HF safetensors from --checkpoint.initial_load_path: $H2" "$TMP/.err"
t_run "initial_load_path starts from the same model as DCP" "$TRAIN" --config "$TMP/tiny.toml" \
	--job.dump_folder "$TMP/j" --training.steps 1 --checkpoint.initial_load_path "$TMP/d/checkpoint/step-2"
"$C" diff "$TMP/i/checkpoint/step-1" "$TMP/j/checkpoint/step-1" >"$TMP/ij.diff" 2>&1
bad=$(grep -vc ' ok  *max_abs 0 max_rel 0$' "$TMP/ij.diff")
[ "$bad" -eq 0 ] && t_ok "a step from the HF folder equals a step from the DCP folder bit for bit" ||
	t_not_ok "a step from the HF folder equals a step from the DCP folder" "$(grep -v ' ok ' "$TMP/ij.diff" | head -3)"
t_run "initial_load_in_hf without initial_load_path reads model.hf_assets_path" "$TRAIN" \
	--config "$TMP/tiny.toml" --job.dump_folder "$TMP/k" --training.steps 1 \
	--checkpoint.initial_load_in_hf --model.hf_assets_path "$H2"
t_grep "it names model.hf_assets_path" "loading HF safetensors from --model.hf_assets_path: $H2" "$TMP/.err"
t_fails "initial_load_in_hf needs initial_load_model_only, as torchtitan asserts" 2 "$TRAIN" \
	--config "$TMP/tiny.toml" --checkpoint.initial_load_in_hf --checkpoint.initial_load_model_only false
t_grep "the refusal says why" 'initial_load_in_hf: needs checkpoint.initial_load_model_only' "$TMP/.err"

# A family's HF save and load go through its own key table: Qwen3-MoE's
# experts one tensor per expert, its head_dim 128 wider than dim / n_heads.
Q="--model.name qwen3 --model.flavor debugmodel_moe_small --training.mixed_precision_param float32"
t_run "qwen3 MoE: last_save_in_hf" "$TRAIN" --config "$TMP/tiny.toml" $Q --job.dump_folder "$TMP/qh" \
	--checkpoint.last_save_model_only --checkpoint.last_save_in_hf --model.hf_assets_path "$TMP/none"
t_grep "qwen3 MoE: the HF folder holds HF's per-expert names" \
	'"model.layers.1.mlp.experts.7.down_proj.weight"' "$TMP/qh/checkpoint/step-2/model.safetensors.index.json"
t_run "qwen3 MoE: the same run with a DCP last save" "$TRAIN" --config "$TMP/tiny.toml" $Q \
	--job.dump_folder "$TMP/qd" --checkpoint.last_save_model_only
"$C" to-hf "$TMP/qd/checkpoint/step-2" "$TMP/qd-hf" --model qwen3 --flavor debugmodel_moe_small \
	>/dev/null 2>&1
"$C" diff "$TMP/qd-hf" "$TMP/qh/checkpoint/step-2" >"$TMP/qhf.diff" 2>&1
if [ "$(grep -c ' ok  *max_abs 0 max_rel 0$' "$TMP/qhf.diff")" -gt 0 ] &&
	[ "$(grep -vc ' ok  *max_abs 0 max_rel 0$' "$TMP/qhf.diff")" -eq 0 ]; then
	t_ok "qwen3 MoE: the HF last save equals titan-ckpt-convert to-hf, bit for bit"
else
	t_not_ok "qwen3 MoE: the HF last save equals to-hf" "$(grep -v ' ok ' "$TMP/qhf.diff" | head -3)"
fi
t_run "qwen3 MoE: initial_load_in_hf from the HF folder" "$TRAIN" --config "$TMP/tiny.toml" $Q \
	--job.dump_folder "$TMP/qi" --training.steps 1 --checkpoint.initial_load_in_hf \
	--checkpoint.initial_load_path "$TMP/qh/checkpoint/step-2"
# HF has no place for expert_bias: the DCP start is the HF folder converted
# back (expert_bias at its initial 0 in both).
"$C" from-hf "$TMP/qh/checkpoint/step-2" "$TMP/qh.dcp" --model qwen3 --flavor debugmodel_moe_small \
	>/dev/null 2>&1
t_run "qwen3 MoE: initial_load_path from its from-hf conversion" "$TRAIN" --config "$TMP/tiny.toml" \
	$Q --job.dump_folder "$TMP/qj" --training.steps 1 --checkpoint.initial_load_path "$TMP/qh.dcp"
"$C" diff "$TMP/qi/checkpoint/step-1" "$TMP/qj/checkpoint/step-1" >"$TMP/qij.diff" 2>&1
[ "$(grep -vc ' ok  *max_abs 0 max_rel 0$' "$TMP/qij.diff")" -eq 0 ] &&
	t_ok "qwen3 MoE: a step from the HF folder equals a step from its DCP conversion bit for bit" ||
	t_not_ok "qwen3 MoE: a step from HF equals a step from DCP" "$(grep -v ' ok ' "$TMP/qij.diff" | head -3)"

# One run per dump folder: a second one is refused while the first runs.
cat >"$TMP/long.toml" <<EOF
[training]
dataset_path = "$TMP/data"
local_batch_size = 1
seq_len = 8
steps = 100000
[checkpoint]
enable = true
interval = 100000
[activation_checkpoint]
mode = "none"
EOF
"$TRAIN" --config "$TMP/long.toml" --job.dump_folder "$TMP/busy" >/dev/null 2>"$TMP/first.err" &
first=$!
n=0
while ! grep -q 'Training starts' "$TMP/first.err" 2>/dev/null && [ $n -lt 300 ]; do
	sleep 0.1
	n=$((n + 1))
done
t_fails "a second titan-train on the same dump folder is refused" 1 "$TRAIN" --config "$TMP/tiny.toml" \
	--job.dump_folder "$TMP/busy"
t_grep "the refusal says another run is there" 'busy: another titan-train is running in this folder' "$TMP/.err"
kill "$first"
wait "$first"
rc=$?
[ "$rc" -eq 0 ] && t_ok "the first run stops cleanly on SIGTERM" ||
	t_not_ok "the first run stops cleanly on SIGTERM" "exit $rc: $(tail -2 "$TMP/first.err")"
if [ -s "$TMP/busy/metrics.jsonl" ] && ! grep -qv '^{"step":' "$TMP/busy/metrics.jsonl"; then
	t_ok "its metrics.jsonl holds its own lines only"
else
	t_not_ok "its metrics.jsonl holds its own lines only" "$(head -3 "$TMP/busy/metrics.jsonl")"
fi
t_run "once it is gone the folder is free" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/busy" \
	--checkpoint.enable false --training.steps 1

# A kill while a step was replaced leaves step-N.old.PID: the next run removes it.
dead=$(sh -c 'echo $$')
cp -r "$TMP/v/checkpoint/step-1" "$TMP/v/checkpoint/step-1.old.$dead"
t_run "a later run" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/v" --training.steps 3
if ls "$TMP/v/checkpoint" | grep -q '\.old\.'; then
	t_not_ok "removes the leftover of a killed overwrite" "$(ls "$TMP/v/checkpoint")"
else
	t_ok "removes the leftover of a killed overwrite"
fi

# Validation data must be the training data's tokens.
"$GEN" gen 4 60 256 100 200 >"$TMP/other.tts"
"$BIN/titan-shard" -q --out "$TMP/otherdata" --val-fraction 0.5 "$TMP/other.tts"
t_fails "a validation folder made with another tokenizer is refused" 1 "$TRAIN" --config "$TMP/tiny.toml" \
	--job.dump_folder "$TMP/val" --checkpoint.enable false --validation.enable --validation.freq 1 \
	--validation.steps 1 --validation.seq_len 16 --validation.local_batch_size 1 \
	--validation.dataset_path "$TMP/otherdata"
t_grep "the refusal says so" 'otherdata: tokenized with another tokenizer' "$TMP/.err"

# Listings that cannot be written are failures.
for opt in --list-keys --list-flavors --job.print_config; do
	t_fails "titan-train $opt > /dev/full fails" 1 sh -c "'$TRAIN' $opt >/dev/full"
done
t_grep "saying why" 'standard output: No space left on device' "$TMP/.err"

t_done
