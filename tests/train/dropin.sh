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

t_done
