#!/bin/sh
# A checkpoint damaged on disk: one flipped byte in a rank's .distcp is
# refused by titan-train's resume on 2 ranks as titan-ckpt-convert verify
# refuses it (the zip records' CRC-32), naming the file, and so is a byte in
# a checkpoint of 1 rank resumed on 2.  On main the resume trained on the
# damaged weights.
. tests/lib.sh

TRAIN="$BIN/titan-train"
C="$BIN/titan-ckpt-convert"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive NO_COLOR=1

t_random_shards "$TMP/data" 5 200 256 60 0.1
t_tiny_job "$TMP/c.toml" "$TMP/data" 1
cat >>"$TMP/c.toml" <<EOF
[checkpoint]
enable = true
interval = 1
last_save_model_only = false
[activation_checkpoint]
mode = "none"
[debug]
seed = 3
EOF

# flip FILE OFFSET: xor the byte at OFFSET with 1
flip() {
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	printf "\\$(printf %03o $((b ^ 1)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

t_run "1 step on 2 ranks saves a checkpoint" $MPIRUN -np 2 "$TRAIN" --config "$TMP/c.toml" \
	--job.dump_folder "$TMP/run"
S="$TMP/run/checkpoint/step-1"
t_run "verify passes it" "$C" verify "$S"
cp -r "$TMP/run" "$TMP/good"

# The middle of rank 1's file lies inside a weight's storage (the file is
# nearly all float32 data; its layout is the same on every run).
F="$S/__1_0.distcp"
flip "$F" $(($(wc -c <"$F") / 2))
t_fails "verify refuses the flipped byte" 1 "$C" verify "$S"
t_grep "naming the file and the CRC" "__1_0.distcp at [0-9]* (.*): zip: .*: CRC-32 [0-9a-f]*, expected" \
	"$TMP/.err"
t_fails "titan-train refuses to resume from it on 2 ranks" 1 $MPIRUN_REFUSED -np 2 "$TRAIN" \
	--config "$TMP/c.toml" --job.dump_folder "$TMP/run" --training.steps 2
t_grep "naming the file as verify does" "__1_0.distcp at [0-9]* (.*): zip: .*: CRC-32 [0-9a-f]*, expected" \
	"$TMP/.err"
if grep -q '"step":2' "$TMP/run/metrics.jsonl" 2>/dev/null; then
	t_not_ok "no step was trained on it" "$(tail -2 "$TMP/run/metrics.jsonl")"
else
	t_ok "no step was trained on it"
fi

# Another mesh: the one rank reads both ranks' files.
t_fails "titan-train refuses it on 1 rank too" 1 "$TRAIN" --config "$TMP/c.toml" \
	--job.dump_folder "$TMP/run" --training.steps 2
t_grep "naming the file" "__1_0.distcp at [0-9]* (.*): zip: .*: CRC-32" "$TMP/.err"

# Resharded, 1 -> 2: each rank reads only its rows of a weight saved whole,
# and the ranks check each record by joining the CRC-32s of their rows
# (dcp_load_parts); the byte lies in one rank's rows, and the load fails.
t_run "1 step on 1 rank saves a checkpoint" "$TRAIN" --config "$TMP/c.toml" \
	--job.dump_folder "$TMP/one"
F1="$TMP/one/checkpoint/step-1/__0_0.distcp"
cp -r "$TMP/one" "$TMP/one_good"
flip "$F1" $(($(wc -c <"$F1") / 2))
t_fails "titan-train refuses it resharded on 2 ranks" 1 $MPIRUN_REFUSED -np 2 "$TRAIN" \
	--config "$TMP/c.toml" --job.dump_folder "$TMP/one" --training.steps 2
t_grep "naming the file as verify does" "__0_0.distcp at [0-9]* (.*): zip: .*: CRC-32 [0-9a-f]*, expected" \
	"$TMP/.err"
t_run "the undamaged one resumes resharded on 2 ranks" $MPIRUN -np 2 "$TRAIN" --config "$TMP/c.toml" \
	--job.dump_folder "$TMP/one_good" --training.steps 2
t_grep "from step 1" 'Loading the checkpoint from .*step-1' "$TMP/.err"

t_run "the undamaged checkpoint resumes on 2 ranks" $MPIRUN -np 2 "$TRAIN" --config "$TMP/c.toml" \
	--job.dump_folder "$TMP/good" --training.steps 2
t_grep "from step 1" 'Loading the checkpoint from .*step-1' "$TMP/.err"

t_done
