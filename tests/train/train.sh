#!/bin/sh
# End-to-end tests of titan-train on a tiny data set: the log line, TensorBoard
# files, validation, checkpoints, and resume after kill -9 being bit-exact.
. tests/lib.sh

TRAIN="$BIN/titan-train"
# Same thread count in every run: reductions are bit-exact for a fixed count.
# Passive waiting keeps OpenMP from spinning on a busy CI machine.
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 NO_COLOR=1

# 300 documents of up to 120 random ids (vocab 256), seed 11; 10% to val.
t_random_shards "$TMP/data" 11 300 256 120 0.1

cat >"$TMP/tiny.toml" <<EOF
[job]
description = "titan-train e2e"
[metrics]
log_freq = 5
enable_tensorboard = true
[model]
flavor = "debugmodel"
[optimizer]
lr = 1e-3
[lr_scheduler]
warmup_steps = 3
decay_type = "cosine"
[training]
dataset_path = "$TMP/data"
local_batch_size = 1
global_batch_size = 2
seq_len = 16
steps = 20
[checkpoint]
enable = true
interval = 10
keep_latest_k = 0
last_save_model_only = false
[validation]
enable = true
freq = 10
steps = 2
local_batch_size = 2
seq_len = 16
[debug]
seed = 42
EOF

# A: 20 steps straight.
t_run "20 steps straight" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/a"
cp "$TMP/.err" "$TMP/a.log"
t_grep "log line at step 1 is torchtitan's" \
	'step:  1  loss: [ 0-9][0-9]\.[0-9]\{5\}  grad_norm: [ 0-9.]\{7\}  memory: [ 0-9.]\{5\}GiB([0-9.]*%)  tps: [0-9,]*  tflops: [0-9,]*\.[0-9][0-9]  mfu: [0-9.]*%$' "$TMP/a.log"
t_grep "log line every metrics.log_freq steps" '^\[titan\] .* - root - INFO - step: 15  loss: ' "$TMP/a.log"
if grep -q 'step:  2  loss' "$TMP/a.log"; then t_not_ok "no log line between log steps"; else t_ok "no log line between log steps"; fi
t_grep "validation logged as torchtitan does" 'validate step: 10  loss: [ 0-9.]*  memory: ' "$TMP/a.log"
esc=$(printf '\033')
if grep -q "$esc" "$TMP/a.log"; then t_not_ok "no colour when stderr is not a terminal"; else t_ok "no colour when stderr is not a terminal"; fi
t_grep "loss of every step in metrics.jsonl" '^{"step":20,"loss":' "$TMP/a/metrics.jsonl"
t_grep "validation loss in metrics.jsonl" '^{"step":20,"validation_loss":' "$TMP/a/metrics.jsonl"
for s in 10 20; do
	if [ -f "$TMP/a/checkpoint/step-$s/.metadata" ] && [ -f "$TMP/a/checkpoint/step-$s/__0_0.distcp" ]; then
		t_ok "DCP checkpoint step-$s written"
	else
		t_not_ok "DCP checkpoint step-$s written" "$(ls -la "$TMP/a/checkpoint" 2>&1)"
	fi
done

# TensorBoard: one event file under tb/<YYYYmmdd-HHMM>/, read back by our reader
# (every CRC checked), with torchtitan's tags.
ev=$(ls "$TMP"/a/tb/*/events.out.tfevents.* 2>/dev/null | head -1)
case "$ev" in
*/tb/[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-[0-9][0-9][0-9][0-9]/events.out.tfevents.[0-9]*.*.[0-9]*.[0-9]*) t_ok "event file named as TensorBoard's writer names it" ;;
*) t_not_ok "event file named as TensorBoard's writer names it" "$ev" ;;
esac
t_run "event file reads back with valid CRCs" "$TRAIN" --read-events "$ev"
cp "$TMP/.out" "$TMP/events.txt"
for tag in loss_metrics/global_avg_loss loss_metrics/global_max_loss grad_norm lr \
	'throughput(tps)' tflops 'mfu(%)' 'memory/max_active(GiB)' 'memory/max_reserved(GiB)' \
	'memory/max_reserved(%)' 'time_metrics/end_to_end(s)' 'time_metrics/data_loading(s)' \
	'time_metrics/data_loading(%)' n_tokens_seen validation_metrics/loss; do
	if awk -F'\t' -v t="$tag" '$3 == t { n++ } END { exit !(n > 0) }' "$TMP/events.txt"; then
		t_ok "tensorboard tag $tag"
	else
		t_not_ok "tensorboard tag $tag"
	fi
done
# The loss scalar at step 15 is the logged loss (as float32).
want=$(t_losses "$TMP/a/metrics.jsonl" 15 15)
got=$(awk -F'\t' '$2 == 15 && $3 == "loss_metrics/global_avg_loss" { print $4 }' "$TMP/events.txt")
if awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-5 * a) }'; then
	t_ok "tensorboard loss at step 15 is the logged loss"
else
	t_not_ok "tensorboard loss at step 15 is the logged loss" "jsonl $want, events $got"
fi
if [ -n "${PYTHON:-}" ] && "$PYTHON" -c 'import tensorboard' 2>/dev/null; then
	t_run "tensorboard's EventAccumulator loads the run" "$PYTHON" scripts/tb_check.py "$TMP/a/tb" \
		--expect-tag loss_metrics/global_avg_loss --expect-steps 1,5,10,15,20
else
	t_skip "tensorboard's EventAccumulator loads the run" "PYTHON with tensorboard not set"
fi

# Loss curve: terminal plot and a PNG that an independent decoder (Python's
# zlib and CRC) accepts.
t_run "loss curve plotted" "$TRAIN" --plot-loss "$TMP/a/metrics.jsonl" --png "$TMP/loss.png"
t_grep "terminal plot drawn" '^ *[0-9.]* |.*\*' "$TMP/.out"
if command -v python3 >/dev/null 2>&1; then
	t_run "PNG decodes with zlib, every chunk CRC right" python3 -c '
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n"
i, idat = 8, b""
while i < len(b):
    n, = struct.unpack(">I", b[i:i+4]); t = b[i+4:i+8]; d = b[i+8:i+8+n]
    assert struct.unpack(">I", b[i+8+n:i+12+n])[0] == zlib.crc32(t + d), t
    if t == b"IHDR": w, h = struct.unpack(">II", d[:8])
    if t == b"IDAT": idat += d
    i += 12 + n
raw = zlib.decompress(idat)
assert (w, h) == (800, 500) and len(raw) == h * (1 + 3 * w)
assert len(set(raw[1 + 3 * w * 100: 3 * w * 400])) > 3
' "$TMP/loss.png"
else
	t_skip "PNG decodes with zlib, every chunk CRC right" "no python3"
fi

# B: the same job, killed with -9 during step 15 (after the step-10 checkpoint),
# then resumed: steps 11-20 must repeat bit for bit.
OMP_NUM_THREADS=2 "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/b" 2>"$TMP/b1.log" &
t_kill_after $! "$TMP/b" 10 14
if grep -q '^{"step":20,' "$TMP/b/metrics.jsonl"; then
	t_not_ok "run killed before its end" "it finished before the kill"
else
	t_ok "run killed before its end"
fi
t_run "resume after kill -9" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/b"
cp "$TMP/.err" "$TMP/b2.log"
t_grep "resume loads the latest complete checkpoint" 'Loading the checkpoint from .*/step-10' "$TMP/b2.log"
t_grep "resume starts at step 11" 'Training starts at step 11' "$TMP/b2.log"
t_losses "$TMP/a/metrics.jsonl" 11 20 >"$TMP/a.loss"
t_losses "$TMP/b/metrics.jsonl" 11 20 >"$TMP/b.loss"
if [ "$(wc -l <"$TMP/a.loss")" -eq 10 ] && cmp -s "$TMP/a.loss" "$TMP/b.loss"; then
	t_ok "resume_after_kill_is_bit_exact (steps 11-20)"
else
	t_not_ok "resume_after_kill_is_bit_exact (steps 11-20)" "$(paste "$TMP/a.loss" "$TMP/b.loss")"
fi

# C: a fresh folder started from A's step-10 through initial_load_path.
t_run "start from initial_load_path" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/c" \
	--checkpoint.initial_load_path "$TMP/a/checkpoint/step-10" --checkpoint.initial_load_model_only false
t_losses "$TMP/c/metrics.jsonl" 11 20 >"$TMP/c.loss"
if [ "$(wc -l <"$TMP/c.loss")" -eq 10 ] && cmp -s "$TMP/a.loss" "$TMP/c.loss"; then
	t_ok "initial_load_path start is bit-exact (steps 11-20)"
else
	t_not_ok "initial_load_path start is bit-exact (steps 11-20)" "$(paste "$TMP/a.loss" "$TMP/c.loss")"
fi

# D: SIGTERM finishes the step, saves it, exits 0; the resumed run continues.
"$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/d" --checkpoint.interval 100 2>"$TMP/d.log" &
pid=$!
n=0
while [ $n -lt 6000 ] && kill -0 $pid 2>/dev/null && ! grep -q '^{"step":3,' "$TMP/d/metrics.jsonl" 2>/dev/null; do
	sleep 0.05
	n=$((n + 1))
done
kill -TERM $pid
wait $pid
rc=$?
if [ $rc -eq 0 ]; then t_ok "SIGTERM exits 0"; else t_not_ok "SIGTERM exits 0" "status $rc"; fi
last=$(grep -c '"loss"' "$TMP/d/metrics.jsonl")
if [ -f "$TMP/d/checkpoint/step-$last/.metadata" ] && [ "$last" -lt 20 ]; then
	t_ok "SIGTERM saved the step it finished (step $last)"
else
	t_not_ok "SIGTERM saved the step it finished" "last step $last: $(ls "$TMP/d/checkpoint" 2>&1)"
fi
t_run "run stopped by SIGTERM resumes" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/d" --checkpoint.interval 100
t_losses "$TMP/d/metrics.jsonl" 11 20 >"$TMP/d.loss"
t_same "SIGTERM stop and resume is bit-exact" "$TMP/a.loss" "$TMP/d.loss"

# G: async checkpoints every 5 steps, keeping the newest 2: the same losses, and
# only step-15 and step-20 left.
t_run "async checkpoints with keep_latest_k 2" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/g" \
	--checkpoint.async_mode async --checkpoint.interval 5 --checkpoint.keep_latest_k 2
t_losses "$TMP/g/metrics.jsonl" 11 20 >"$TMP/g.loss"
t_same "checkpointing does not change the losses" "$TMP/a.loss" "$TMP/g.loss"
left=$(cd "$TMP/g/checkpoint" && ls -d step-* | sort | tr '\n' ' ')
if [ "$left" = "step-15 step-20 " ]; then t_ok "keep_latest_k purges older checkpoints"; else t_not_ok "keep_latest_k purges older checkpoints" "left: $left"; fi
# step-15 was staged in the host images step-5 and step-10 staged before it
# (lib/trainer/state.c keeps them between async saves): resuming from it is
# bit-exact all the same.
cp -r "$TMP/g" "$TMP/g2"
rm -rf "$TMP/g2/checkpoint/step-20"
t_run "resume from the third async save" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/g2"
t_losses "$TMP/a/metrics.jsonl" 16 20 >"$TMP/a16.loss"
t_losses "$TMP/g2/metrics.jsonl" 16 20 >"$TMP/g2.loss"
t_same "an async save in reused staging resumes bit-exact" "$TMP/a16.loss" "$TMP/g2.loss"

# H: load_step picks an older checkpoint than the latest; exclude_from_loading
# drops parts (without the dataloader state the data restarts: losses differ).
cp -r "$TMP/a" "$TMP/h"
t_run "checkpoint.load_step 10 with 20 present" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/h" \
	--checkpoint.load_step 10
t_grep "load_step chose step-10" 'Loading the checkpoint from .*/step-10' "$TMP/.err"
t_losses "$TMP/h/metrics.jsonl" 11 20 >"$TMP/h.loss"
t_same "resume from load_step is bit-exact" "$TMP/a.loss" "$TMP/h.loss"
rm -rf "$TMP/h/checkpoint/step-20"
t_run "exclude_from_loading dataloader" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/h" \
	--checkpoint.exclude_from_loading dataloader
t_losses "$TMP/h/metrics.jsonl" 11 11 >"$TMP/h11.loss"
if [ -s "$TMP/h11.loss" ] && ! cmp -s "$TMP/h11.loss" "$(head -1 "$TMP/a.loss" >"$TMP/a11.loss"; echo "$TMP/a11.loss")"; then
	t_ok "excluded dataloader state restarts the data"
else
	t_not_ok "excluded dataloader state restarts the data" "$(cat "$TMP/h11.loss" "$TMP/a11.loss")"
fi

# Model-only last save in export_dtype, seed checkpoint.
t_run "last save model only in bfloat16" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/e" \
	--training.steps 3 --checkpoint.last_save_model_only true --checkpoint.export_dtype bfloat16
if [ -f "$TMP/e/checkpoint/step-3/.metadata" ] && ! grep -q 'optimizer' "$TMP/e/checkpoint/step-3/.metadata" &&
	grep -q 'bfloat16' "$TMP/e/checkpoint/step-3/.metadata"; then
	t_ok "model-only export holds only bfloat16 model tensors"
else
	t_not_ok "model-only export holds only bfloat16 model tensors"
fi
t_run "create_seed_checkpoint" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/f" \
	--checkpoint.create_seed_checkpoint
if [ -f "$TMP/f/checkpoint/step-0/.metadata" ] && [ ! -e "$TMP/f/metrics.jsonl" ]; then
	t_ok "seed checkpoint is step-0 and no training ran"
else
	t_not_ok "seed checkpoint is step-0 and no training ran"
fi
t_run "training from a seed checkpoint" "$TRAIN" --config "$TMP/tiny.toml" --job.dump_folder "$TMP/f" --training.steps 2
t_grep "seed checkpoint loaded" 'Loading the checkpoint from .*/step-0' "$TMP/.err"

t_done
